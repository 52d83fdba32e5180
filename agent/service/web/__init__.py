"""The web page of `sbx serve`: an analyst's face on the same HTTP API the curl examples use.

    /                       the page (index.html); /static/<name> its scripts and styles  pages.py
    /web/session            sign in with an API key for a session cookie, sign out    signin.py
    cookie authentication   the `/v1` API accepts the cookie as it accepts a bearer key,
                            with an Origin check and a CSRF token on every change     sessions.py
    security headers        a strict Content-Security-Policy on the page, `frame-ancestors
                            'none'` and same-origin resource policy on every answer   headers.py

The page itself is plain HTML, CSS and JavaScript modules under `static/`,
served from the installed package: no build step, no CDN, nothing fetched
from anywhere but this server. Everything a model, a program or a client
wrote is put into the page as text (`textContent`, DOM nodes), never as HTML.
"""

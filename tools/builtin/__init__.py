"""The built-in tools, each made from its policy rule by a factory.

    execute_python     sandbox session (runner from ToolContext)     execute_python.py
    calculate          exact arithmetic, RestrictedPython + guards   calculate.py, calc_*.py
    list_data_files    the run's data paths, host side               data_files.py
    preview_data_file  first rows of one data file, host side        data_files.py, data_preview.py,
                                                                     tables.py (shared with the
                                                                     data summary)
    http_get           allowlisted domains, public addresses only    http_get.py, http_fetch.py
    ask_user           the operator, now or when the run continues   ask_user.py
    update_plan        the model's plan, checked and echoed          plan.py
    query_sql          the operator's read-only SQL sources, host    query_sql.py, sql_engine.py
    remember           a note about a dataset, for later runs        remember.py
    run_command        a shell command in the sandbox session        run_command.py

Every built-in is registered (`ask_user` only where someone can answer, `query_sql`
only where a sandbox receives its results and the principal has a source, `remember`
only where the face keeps notes); the policy decides which are enabled.
"""

from __future__ import annotations

from sbx.tools.builtin.ask_user import answerable, make_ask_user
from sbx.tools.builtin.calculate import make_calculate
from sbx.tools.builtin.data_files import make_list_data_files, make_preview_data_file
from sbx.tools.builtin.execute_python import make_execute_python
from sbx.tools.builtin.http_get import make_http_get
from sbx.tools.builtin.plan import check_plan_call, make_update_plan
from sbx.tools.builtin.query_sql import make_query_sql
from sbx.tools.builtin.remember import make_remember
from sbx.tools.builtin.run_command import make_run_command
from sbx.tools.context import ToolContext
from sbx.tools.guard import DataGuard
from sbx.tools.policy import Policy
from sbx.tools.registry import Tool

__all__ = ["builtin_tools", "check_plan_call"]


def builtin_tools(policy: Policy, context: ToolContext | None = None) -> list[Tool]:
    """Every built-in tool, configured from the policy (enabled or not).

    `ask_user` is left out where no one can answer it (`context` says), so a
    model is never offered a question nobody will read.
    """
    rules = policy.tools
    guard = DataGuard(policy.guard.for_principal(context.principal if context else "",
                                                 context.team if context else None))
    tools = [
        make_execute_python(),
        make_calculate(rules.calculate),
        make_list_data_files(rules.list_data_files),
        make_preview_data_file(rules.preview_data_file, guard),
        make_http_get(rules.http_get),
        make_update_plan(rules.update_plan),
        make_run_command(),
    ]
    if context is not None and answerable(context):
        tools.append(make_ask_user(rules.ask_user))
    if context is not None and context.notes is not None:
        tools.append(make_remember())
    if context is not None and context.data_drop is not None:
        if rules.query_sql.sources_for(context.principal):
            tools.append(make_query_sql(rules.query_sql, context.principal, guard))
    return tools

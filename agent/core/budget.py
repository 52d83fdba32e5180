"""Budget checks, made before the spending they would allow, each naming its flag.

`before_request` runs before every model request: turns, wall time, and
tokens (used so far plus an estimate of the prompt about to be sent, so the
request that would pass the cap is never made). `before_tools` runs after a
reply asks for tools and before any of them runs: calls per turn, calls per
run, wall time, tokens. A reply that answers is accepted even if it was the
one that used the last tokens: the request was allowed, and its answer was
paid for. An execution is given only the run's remaining time (the loop sets
the gate's deadline, and the sandbox cuts the code there); so are a model
request, its retries and their waits (`remaining_s`), and `model_ending` turns
the model client's `OutOfTime` into `time_limit`. `work_ending` asks the money
budgets about sandbox work done for a run before its loop (a restore's replay).
"""

from __future__ import annotations

from sbx.agent.core.cost import Tariff
from sbx.agent.core.settings import Budget
from sbx.agent.core.spend import SpendLimit, spend_ending
from sbx.agent.core.state import Ending, RunState, SandboxUsage
from sbx.agent.model.client import ModelError, OutOfTime


def remaining_s(state: RunState, budget: Budget, now: float) -> float:
    """Seconds of wall time left in the run (never negative)."""
    return max(0.0, budget.max_wall_time - (now - state.started))


def time_ending(state: RunState, budget: Budget, now: float) -> Ending | None:
    """`time_limit` when the run's wall time is used up."""
    elapsed = now - state.started
    if elapsed < budget.max_wall_time:
        return None
    return Ending(
        status="time_limit",
        message=(
            f"The run reached max_wall_time of {budget.max_wall_time:g} s after {elapsed:.1f} s "
            "(--max-time)"
        ),
    )


def model_ending(state: RunState, budget: Budget, error: ModelError, *, now: float) -> Ending:
    """How a failed model request ends the run: `time_limit` when time ran out, else `model_error`.

    A retry the endpoint asked for (`Retry-After`) that would not fit in the time left
    ends the run at once, as `time_limit`, rather than sleeping into the limit.
    """
    ended = time_ending(state, budget, now)
    if ended is not None:
        return ended
    if isinstance(error, OutOfTime):
        message = (
            f"The model request could not finish within max_wall_time of "
            f"{budget.max_wall_time:g} s: {error} (--max-time)"
        )
        return Ending(status="time_limit", message=message)
    return Ending(status="model_error", message=f"Model request failed: {error}")


def cost_ending(
    state: RunState, budget: Budget, tariff: Tariff | None, *, next_cost: float = 0.0
) -> Ending | None:
    """`cost_limit` when the run's cost, plus what the next step costs, passes `max_cost`."""
    if budget.max_cost is None or tariff is None:
        return None
    spent = tariff.cost(state.usage, state.sandbox).total
    over = spent + next_cost > budget.max_cost if next_cost else spent >= budget.max_cost
    if not over:
        return None
    what = "The next request" if next_cost else "More tool calls"
    return Ending(
        status="cost_limit",
        message=(
            f"{what} would exceed max_cost of {budget.max_cost:g} {tariff.currency}; "
            f"{spent:.4f} {tariff.currency} spent (--max-cost)"
        ),
    )


def before_request(
    state: RunState, budget: Budget, *, now: float, prompt_estimate: int,
    tariff: Tariff | None = None, spend: SpendLimit | None = None,
) -> Ending | None:
    """The ending the next model request would cause, or None when it may be made.

    `spend` is the budget above the run (a key's or team's), asked last: `budget_exceeded`.
    """
    if state.turns >= budget.max_turns:
        return Ending(
            status="step_limit",
            message=f"The next request would exceed max_turns of {budget.max_turns} (--max-turns)",
        )
    ended = time_ending(state, budget, now)
    if ended is not None:
        return ended
    used = state.usage.total_tokens
    if used + prompt_estimate > budget.max_total_tokens:
        return Ending(
            status="token_limit",
            message=(
                f"The next request (about {prompt_estimate} prompt tokens) would exceed "
                f"max_total_tokens of {budget.max_total_tokens}; {used} used (--max-tokens)"
            ),
        )
    next_cost = tariff.prompt(prompt_estimate) if tariff is not None else 0.0
    return (cost_ending(state, budget, tariff, next_cost=next_cost)
            or spend_ending(state, tariff, spend, next_cost=next_cost))


def before_tools(
    state: RunState, budget: Budget, *, now: float, calls: int, tariff: Tariff | None = None,
    spend: SpendLimit | None = None,
) -> Ending | None:
    """The ending running `calls` more tool calls would cause, or None when they may run."""
    if calls > budget.max_tool_calls_per_turn:
        return Ending(
            status="tool_limit",
            message=(
                f"The reply asked for {calls} tool calls, over max_tool_calls_per_turn of "
                f"{budget.max_tool_calls_per_turn} (--max-tool-calls-per-turn)"
            ),
        )
    if state.tool_calls + calls > budget.max_tool_calls:
        return Ending(
            status="tool_limit",
            message=(
                f"{calls} more tool call(s) would exceed max_tool_calls of "
                f"{budget.max_tool_calls}; {state.tool_calls} made (--max-tool-calls)"
            ),
        )
    ended = time_ending(state, budget, now)
    if ended is not None:
        return ended
    if state.usage.total_tokens > budget.max_total_tokens:
        return Ending(
            status="token_limit",
            message=(
                f"The run used {state.usage.total_tokens} tokens, over max_total_tokens of "
                f"{budget.max_total_tokens} (--max-tokens)"
            ),
        )
    return cost_ending(state, budget, tariff) or spend_ending(state, tariff, spend)


def work_ending(
    used: SandboxUsage, budget: Budget, tariff: Tariff | None, spend: SpendLimit | None
) -> Ending | None:
    """`cost_limit` or `budget_exceeded` when sandbox work done before a run's loop used them up.

    A restore's replay asks it before each cell it re-runs, as the loop asks before each
    batch of tool calls; the run then stops at its first budget check with the same status.
    """
    state = RunState(run_id="", started=0.0, messages=[], sandbox=used)
    return cost_ending(state, budget, tariff) or spend_ending(state, tariff, spend)

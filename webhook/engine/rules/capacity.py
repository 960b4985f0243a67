"""``claim-capacity-unsatisfiable``: a capacity request no device can ever satisfy (KEP-5075)."""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from webhook.engine.model.claims import CapacityAsk, ClaimRequest
from webhook.engine.model.context import ClaimContext, Context, Finding
from webhook.engine.rules.registry import CLAIM, POD, rule
from webhook.quantity import format_bytes


def amount(ask: CapacityAsk, value: object) -> str:
    """Bytes for memory, the plain number for anything else (cores, shares)."""
    if value is None:
        return "?"
    number = value if isinstance(value, Fraction) else Fraction(str(value))
    if ask.name.rpartition("/")[2] == "memory" and number.denominator == 1:
        return format_bytes(int(number))
    return str(number.numerator) if number.denominator == 1 else f"{float(number):g}"


def _message(request: ClaimRequest, ask: CapacityAsk) -> str:
    return (
        f"ask for at most {amount(ask, ask.largest)}: no device of DeviceClass {ask.device_class} can ever "
        f"satisfy request {request.name!r} {ask.name} {amount(ask, ask.requested)} (its request policy's "
        f"largest valid value is {amount(ask, ask.largest)}, over {ask.devices} device(s) the cluster publishes)"
    )


def rounded(ask: CapacityAsk) -> str | None:
    """The rounding the API will apply, for ``--explain``: None when the request is consumed as written."""
    if ask.allocated is None or ask.allocated == ask.requested:
        return None
    return f"{ask.name} {amount(ask, ask.requested)} will be allocated as {amount(ask, ask.allocated)}"


@rule(
    "claim-capacity-unsatisfiable",
    needs=("claims",),  # judging a pod: its templates' claims (a claim object is judged on its own)
    subjects=(POD, CLAIM),
)
def claim_capacity_unsatisfiable(ctx: Context | ClaimContext) -> Iterable[Finding]:
    """Judged only against devices the cluster view knows (ResourceSlices from the watch or ``--context``):
    without them nothing is known, and nothing is denied. The API rounds a request below the minimum or
    between steps *up*; that is what the counts, memory rules and waste report use (see
    :class:`~webhook.engine.model.claims.CapacityAsk`); ``--explain`` says so."""
    if isinstance(ctx, ClaimContext):
        for request in ctx.claim.requests:
            for ask in request.capacity:
                note = rounded(ask)
                if note is not None:
                    ctx.explain(f"request {request.name!r}: {note} (the devices' request policy)")
                if ask.unsatisfiable:
                    where = f"{ctx.claim.spec_at}.{ask.at}"
                    yield Finding("claim-capacity-unsatisfiable", where, _message(request, ask))
        return
    for state in ctx.states:
        for claim in state.judged.claims:
            for request in claim.requests:
                for ask in request.capacity:
                    note = rounded(ask)
                    if note is not None:
                        ctx.explain(f"claim {claim.name!r} request {request.name!r}: {note} (the request policy)")
                    if ask.unsatisfiable:
                        yield Finding(
                            "claim-capacity-unsatisfiable",
                            state.view.dotted("spec", "resourceClaims", claim.index),
                            f"{_message(request, ask)}; in {claim.ref} {ask.at}",
                            state.class_name,
                        )

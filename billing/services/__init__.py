"""Billing write operations: prices, quotes, and every movement of money through the ledger.

All amounts are integers in minor units. Every write goes through `post_entry`, which is
idempotent by a client-chosen key (Stripe's rule: same key + same content returns the original
entry; same key + different content is an error) and checks the zero-sum rule before the
database checks it again at COMMIT.

Flows (value moves from the first account to the second):

    top-up      funding(currency)      -> available(tenant)
    reserve     available(tenant)      -> hold(run)                 on launch, estimated_max
    capture     hold(run)              -> revenue(tenant)           per completed sample (queued by
                hold(run)              -> available(tenant)         its verdict, posted per run
                                                                    batch: queue_capture,
                                                                    post_pending_captures),
                                                                    the unused part of its share
    release     hold(run)              -> available(tenant)         failed / invalid / cancelled
    refund      revenue(tenant)        -> available(tenant)
    upstream    upstream_payable(plat) -> upstream_cost(plat)       per attempt, provider's cost
    adjustment  explicit, any accounts                              reconciliation differences

The run's hold account row is the per-run billing lock: every hook takes it FOR UPDATE before
it decides anything, so concurrent or repeated calls for one run are serialised.

Modules: `errors` (refusals, amount formatting), `accounts`, `posting` (post_entry,
reverse_entry), `money` (top-ups, refunds, balances), `prices` (price versions, quotes),
`runs` (hold, capture, settle, cancel) and `upstream` (provider costs). Import from
`billing.services`; the names below are its public interface.
"""

from .accounts import (
    available_account,
    funding_account,
    hold_account,
    revenue_account,
    upstream_cost_account,
    upstream_payable_account,
)
from .errors import (
    ZERO_DECIMAL_CURRENCIES,
    BillingError,
    IdempotencyConflict,
    InsufficientBalance,
    InsufficientFunds,
    NoActivePrice,
    UnbalancedEntry,
    format_amount,
    major_decimal,
    major_text,
    parse_amount,
    parse_major,
)
from .money import (
    billed_currencies,
    derived_balance,
    derived_balance_sum,
    refund,
    run_refundable,
    top_up,
)
from .posting import (
    SettlementLine,
    UntrackedEntry,
    post_entry,
    post_untracked_entries,
    reverse_entry,
    was_replayed,
)
from .prices import (
    DEEP_THINKING_MODE,
    DEFAULT_CURRENCY,
    DEFAULT_PRICE_VERSION,
    QUOTE_VERSION,
    active_price_version,
    build_quote,
    create_price_version,
    ensure_default_price_version,
    platform_takes_screenshots,
    quote_groups,
    target_key,
)
from .runs import (
    SettleOutcome,
    pending_capture,
    post_pending_captures,
    queue_capture,
    quote_and_reserve,
    release_unaccepted_hold,
    settle_run,
)
from .upstream import adjust_upstream_cost, record_upstream_cost

__all__ = [
    "DEEP_THINKING_MODE",
    "DEFAULT_CURRENCY",
    "DEFAULT_PRICE_VERSION",
    "QUOTE_VERSION",
    "ZERO_DECIMAL_CURRENCIES",
    "BillingError",
    "IdempotencyConflict",
    "InsufficientBalance",
    "InsufficientFunds",
    "NoActivePrice",
    "SettleOutcome",
    "SettlementLine",
    "UnbalancedEntry",
    "UntrackedEntry",
    "active_price_version",
    "adjust_upstream_cost",
    "available_account",
    "billed_currencies",
    "build_quote",
    "create_price_version",
    "derived_balance",
    "derived_balance_sum",
    "ensure_default_price_version",
    "format_amount",
    "funding_account",
    "hold_account",
    "major_decimal",
    "major_text",
    "parse_amount",
    "parse_major",
    "pending_capture",
    "platform_takes_screenshots",
    "post_entry",
    "post_pending_captures",
    "post_untracked_entries",
    "queue_capture",
    "quote_and_reserve",
    "quote_groups",
    "record_upstream_cost",
    "refund",
    "release_unaccepted_hold",
    "revenue_account",
    "reverse_entry",
    "run_refundable",
    "settle_run",
    "target_key",
    "top_up",
    "upstream_cost_account",
    "upstream_payable_account",
    "was_replayed",
]

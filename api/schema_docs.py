"""Shapes and examples for the OpenAPI schema (drf-spectacular), kept out of the views."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, inline_serializer
from rest_framework import serializers as s

RUN_ID = "5f0c3a5e-8d7b-4f39-9a51-0b1c2d3e4f50"
REQUEST_ID = "4c1f0e9a7b2d4e6f8a9b0c1d2e3f4a5b"

ERROR = inline_serializer(
    "Error",
    {
        "detail": s.CharField(),
        "code": s.CharField(help_text="stable and machine-readable; `detail` is for people"),
        "request_id": s.CharField(help_text="also the X-Request-ID header; quote it to us"),
        "errors": s.ListField(
            child=inline_serializer(
                "FieldProblem", {"field": s.CharField(), "message": s.CharField()}
            ),
            required=False,
        ),
    },
)
ROW_ERRORS = inline_serializer(
    "StatementErrors",
    {
        "detail": s.CharField(),
        "code": s.CharField(),
        "request_id": s.CharField(),
        "errors": s.ListField(
            child=inline_serializer(
                "RowProblem",
                {
                    "row": s.IntegerField(allow_null=True),
                    "field": s.CharField(),
                    "message": s.CharField(),
                },
            )
        ),
    },
)
PREVIEW = inline_serializer(
    "Preview",
    {
        "samples": s.IntegerField(),
        "batches": s.ListField(child=s.DictField()),
        "duplicates": s.ListField(child=s.DictField()),
        "quote": s.DictField(allow_null=True),
        "quote_problem": s.CharField(),
        "available_balance": s.IntegerField(allow_null=True),
        "available_balance_display": s.CharField(allow_null=True),
        "short_by": s.IntegerField(allow_null=True),
        "can_launch": s.BooleanField(),
        "preview_token": s.CharField(allow_null=True),
    },
)
LAUNCH_REQUEST = inline_serializer("LaunchRequest", {"preview_token": s.CharField()})
LAUNCH = inline_serializer(
    "Launch",
    {
        "run_id": s.UUIDField(),
        "samples": s.IntegerField(),
        "batches": s.IntegerField(),
        "quote": s.DictField(),
    },
)
_COUNTS: dict[str, s.Field] = {
    "outcome": s.CharField(
        help_text="empty, in_progress, all_succeeded, partially_succeeded, all_failed or "
        "cancelled (finished because a cancel ended the samples not yet asked)"
    ),
    "finished": s.BooleanField(),
    "planned": s.IntegerField(),
    "succeeded": s.IntegerField(),
    "failed": s.IntegerField(help_text="every failed sample, the cancelled ones included"),
    "cancelled": s.IntegerField(help_text="of `failed`, those a cancel ended before submission"),
    "failed_not_cancelled": s.IntegerField(help_text="`failed` minus `cancelled`"),
    "invalid": s.IntegerField(),
    "review": s.IntegerField(),
    "pending": s.IntegerField(),
    "uncertain": s.IntegerField(),
    "parked": s.IntegerField(),
    "layers": s.DictField(child=s.DictField(child=s.IntegerField())),
}
RUN_STATUS = inline_serializer(
    "RunStatus",
    {
        "run_id": s.UUIDField(),
        "tenant": s.CharField(),
        "campaign": s.IntegerField(),
        "status": s.CharField(),
        "created_at": s.DateTimeField(),
        "finished_at": s.DateTimeField(allow_null=True),
        "cancelled_at": s.DateTimeField(allow_null=True),
        "resumes": s.IntegerField(),
        **_COUNTS,
        "platforms": s.DictField(child=s.DictField()),
        "upstream_cancel": inline_serializer(
            "UpstreamCancel",
            {
                "asked": s.IntegerField(
                    help_text="accepted, unfinished tasks the run's cancel asked the upstream "
                    "to stop (platforms that can stop one; after the cancel, by a worker)"
                ),
                "answered": s.IntegerField(help_text="of `asked`, those with an answer"),
                "acknowledged": s.IntegerField(help_text="of `answered`, stopped upstream"),
                "failed": s.IntegerField(help_text="of `answered`, requests that failed"),
            },
        ),
    },
)
CANCEL = inline_serializer(
    "Cancel", {"cancelled_samples": s.IntegerField(), "run_id": s.UUIDField(), **_COUNTS}
)
RESUME = inline_serializer(
    "Resume",
    {
        "resume_no": s.IntegerField(),
        "redo": s.IntegerField(),
        "kept": s.IntegerField(),
        "by_reason": s.DictField(child=s.IntegerField()),
    },
)
RECONCILIATION = inline_serializer(
    "Reconciliation",
    {
        "run_id": s.UUIDField(),
        "rows": s.ListField(child=s.DictField()),
        "counts": s.DictField(child=s.IntegerField()),
        "totals": s.DictField(child=s.IntegerField()),
    },
)
STATEMENT_UPLOAD = inline_serializer(
    "StatementUpload", {"provider": s.CharField(), "file": s.FileField()}
)
STATEMENT = inline_serializer(
    "Statement",
    {
        "statement_id": s.IntegerField(),
        "created": s.BooleanField(),
        "imported": s.IntegerField(),
        "already_known": s.IntegerField(),
    },
)

STATEMENT_IMPORT = inline_serializer(
    "StatementImport",
    {
        "id": s.IntegerField(),
        "url": s.CharField(help_text="this import's progress (GET)"),
        "status": s.ChoiceField(choices=["queued", "running", "done", "failed"]),
        "provider": s.CharField(),
        "filename": s.CharField(),
        "size": s.IntegerField(help_text="bytes"),
        "rows_total": s.IntegerField(allow_null=True, help_text="known once every row is checked"),
        "rows_checked": s.IntegerField(),
        "rows_done": s.IntegerField(help_text="rows written"),
        "errors": s.ListField(
            child=inline_serializer(
                "ImportRowProblem",
                {
                    "row": s.IntegerField(allow_null=True),
                    "field": s.CharField(),
                    "message": s.CharField(),
                },
            ),
            help_text="why a failed import imported nothing (every bad row, up to 200)",
        ),
        "statement_id": s.IntegerField(allow_null=True, help_text="once done"),
        "created": s.BooleanField(
            allow_null=True, help_text="once done; false: the same file was imported before"
        ),
        "imported": s.IntegerField(),
        "already_known": s.IntegerField(),
        "queued_at": s.DateTimeField(),
        "finished_at": s.DateTimeField(allow_null=True),
    },
)

_CAMPAIGN_BODY = {
    "tenant": "acme",
    "name": "Q4 visibility",
    "brand": {"name": "Acme", "aliases": ["ACME"], "domains": ["acme.com"]},
    "competitors": [{"name": "Globex", "aliases": [], "domains": ["globex.com"]}],
    "questions": ["Which CRM is best for a small team?"],
    "topics": {"Which CRM is best for a small team?": ["small business", "crm"]},
    "targets": [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}],
    "repeats": 2,
    "screenshot_policy": "optional",
}
_CAMPAIGN = {
    "id": 7,
    **_CAMPAIGN_BODY,
    "priority": 0,
    "created_at": "2026-11-30T10:00:00Z",
    "updated_at": "2026-11-30T10:00:00Z",
}
CAMPAIGN_BODY = OpenApiExample("A campaign", value=_CAMPAIGN_BODY, request_only=True)
CAMPAIGN_PATCH = OpenApiExample("More repeats", value={"repeats": 3}, request_only=True)
CAMPAIGN = OpenApiExample("The campaign", value=_CAMPAIGN, response_only=True)
CAMPAIGN_LIST = OpenApiExample(
    "A page", value={"next": None, "previous": None, "results": [_CAMPAIGN]}, response_only=True
)
VALIDATION_ERROR = OpenApiExample(
    "Problems with field paths",
    value={
        "detail": "the campaign has problems; nothing was saved",
        "code": "invalid",
        "request_id": REQUEST_ID,
        "errors": [
            {"field": "questions[1]", "message": "expected a string, got int"},
            {"field": "targets[0]", "message": "platform is required"},
        ],
    },
    response_only=True,
    status_codes=["400"],
)
PREVIEW_EXAMPLE = OpenApiExample(
    "A preview",
    value={
        "samples": 2,
        "batches": [{"platform": "openai", "batches": 1, "sizes": [2]}],
        "duplicates": [],
        "quote": {
            "price_version": "default",
            "currency": "USD",
            "unit_prices": {"openai": {"base": 5}},
            "lines": [],
            "estimated_max": 10,
            "estimated_max_display": "0.10 USD",
        },
        "quote_problem": "",
        "available_balance": 10000,
        "available_balance_display": "100.00 USD",
        "short_by": None,
        "can_launch": True,
        "preview_token": "Jx9…",
    },
    response_only=True,
)
LAUNCH_REQUEST_EXAMPLE = OpenApiExample(
    "Launch", value={"preview_token": "Jx9…"}, request_only=True
)
LAUNCH_EXAMPLE = OpenApiExample(
    "Launched",
    value={"run_id": RUN_ID, "samples": 2, "batches": 1, "quote": {"currency": "USD"}},
    response_only=True,
    status_codes=["201", "200"],
)
FUNDS_SHORT_EXAMPLE = OpenApiExample(
    "Funds short",
    value={
        "detail": "tenant 'acme' cannot launch this run: … (short by 0.05 USD); top up first",
        "code": "funds_short",
        "request_id": REQUEST_ID,
        "shortfall": 5,
        "shortfall_display": "0.05 USD",
        "available": 5,
        "required": 10,
        "currency": "USD",
    },
    response_only=True,
    status_codes=["402"],
)
_RUN = {
    "run_id": RUN_ID,
    "tenant": "acme",
    "campaign": 7,
    "planned_samples": 2,
    "created_at": "2026-11-30T10:00:00Z",
    "finished_at": None,
    "cancelled_at": None,
    "resumes": 0,
    "status": "running",
}
_STATUS = {
    "outcome": "in_progress",
    "finished": False,
    "planned": 2,
    "succeeded": 1,
    "failed": 0,
    "cancelled": 0,
    "failed_not_cancelled": 0,
    "invalid": 0,
    "review": 0,
    "pending": 1,
    "uncertain": 0,
    "parked": 0,
    "layers": {"collection": {"completed": 1, "pending": 1}},
}
RUN_LIST = OpenApiExample(
    "A page", value={"next": None, "previous": None, "results": [_RUN]}, response_only=True
)
RUN_STATUS_EXAMPLE = OpenApiExample(
    "In progress",
    value={
        **_RUN,
        **_STATUS,
        "platforms": {"openai": _STATUS},
        "upstream_cancel": {"asked": 0, "answered": 0, "acknowledged": 0, "failed": 0},
    },
    response_only=True,
)
CANCEL_EXAMPLE = OpenApiExample(
    "Cancelled", value={"cancelled_samples": 1, **_RUN, **_STATUS}, response_only=True
)
RESUME_EXAMPLE = OpenApiExample(
    "Resumed",
    value={"resume_no": 1, "redo": 1, "kept": 1, "by_reason": {"failed": 1}},
    response_only=True,
)
_SAMPLE = {
    "id": 101,
    "run_id": RUN_ID,
    "batch_id": 3,
    "question_revision": 11,
    "platform": "openai",
    "device": "desktop",
    "region": "us",
    "mode": "web_search",
    "repeat_index": 0,
    "layers": {
        "submission": "accepted",
        "collection": "completed",
        "evidence": "stored",
        "analysis": "accepted",
        "queue": "done",
    },
    "validity": "valid",
    "validity_reason": "",
    "failure_reason": "",
    "attempts": 1,
    "resumes": 0,
    "evidence": [
        {
            "id": 55,
            "kind": "raw",
            "mime": "application/json",
            "size": 2048,
            "sha256": "9f…",
            "url": "/api/v1/evidence/55/download",
        }
    ],
}
SAMPLE_LIST = OpenApiExample(
    "A page",
    value={"next": "…?cursor=cD0xMDE%3D", "previous": None, "results": [_SAMPLE]},
    response_only=True,
)
SAMPLE_DETAIL = OpenApiExample(
    "A sample",
    value={
        **_SAMPLE,
        "question": "Which CRM is best for a small team?",
        "answer_text": "Acme is a good choice …",
        "citations": [
            {"position": 1, "url": "https://acme.com/", "domain": "acme.com", "title": "Acme"}
        ],
        "mentions": [
            {
                "entity": "Acme",
                "is_brand": True,
                "mentioned": True,
                "count": 2,
                "first_position": 0,
                "rank": 1,
                "sentiment": "positive",
                "recommended": True,
                "sentence": "Acme is a good choice.",
            }
        ],
    },
    response_only=True,
)
REPORT_REFUSED = OpenApiExample(
    "Refused",
    value={
        "detail": f"report for run {RUN_ID} refused: overall: buckets sum to 3, planned 4",
        "code": "report_inconsistent",
        "request_id": REQUEST_ID,
        "differences": ["overall: buckets sum to 3, planned 4"],
    },
    response_only=True,
    status_codes=["409"],
)
LEDGER_EXAMPLE = OpenApiExample(
    "A page",
    value={
        "next": None,
        "previous": None,
        "results": [
            {
                "id": 9,
                "kind": "hold",
                "tenant": "acme",
                "run_id": RUN_ID,
                "sample_id": None,
                "platform": "",
                "upstream_id": "",
                "memo": "",
                "created_at": "2026-11-30T10:00:00Z",
                "postings": [
                    {"account": "available:USD:1", "amount": -10, "currency": "USD"},
                    {"account": "hold:USD:run", "amount": 10, "currency": "USD"},
                ],
            }
        ],
    },
    response_only=True,
)
ACCOUNTS_EXAMPLE = OpenApiExample(
    "A page",
    value={
        "next": None,
        "previous": None,
        "results": [
            {
                "id": 1,
                "code": "available:USD:1",
                "kind": "available",
                "currency": "USD",
                "tenant": "acme",
                "run_id": None,
                "balance": 9990,
                "balance_display": "99.90 USD",
            }
        ],
    },
    response_only=True,
)
RECONCILIATION_EXAMPLE = OpenApiExample(
    "Matched",
    value={
        "run_id": RUN_ID,
        "rows": [
            {
                "platform": "collector",
                "upstream_id": "t-1",
                "run_id": RUN_ID,
                "sample_id": 101,
                "charge": 5,
                "charge_currency": "USD",
                "recorded_cost": 25,
                "recorded_currency": "USD",
                "statement_cost": 25,
                "statement_currency": "USD",
                "cost_currency": "USD",
                "status": "matched",
                "difference": 0,
            }
        ],
        "counts": {"matched": 1},
        "totals": {},
    },
    response_only=True,
)
_IMPORT = {
    "id": 12,
    "url": "/api/v1/statement-imports/12",
    "provider": "collector",
    "filename": "november.csv",
    "size": 14400000,
    "errors": [],
    "queued_at": "2026-12-01T10:00:00Z",
}
STATEMENT_QUEUED_EXAMPLE = OpenApiExample(
    "Queued",
    value={
        **_IMPORT,
        "status": "queued",
        "rows_total": None,
        "rows_checked": 0,
        "rows_done": 0,
        "statement_id": None,
        "created": None,
        "imported": 0,
        "already_known": 0,
        "finished_at": None,
    },
    response_only=True,
    status_codes=["202"],
)
STATEMENT_IMPORTED_EXAMPLE = OpenApiExample(
    "Imported",
    value={
        **_IMPORT,
        "status": "done",
        "rows_total": 400000,
        "rows_checked": 400000,
        "rows_done": 400000,
        "statement_id": 4,
        "created": True,
        "imported": 400000,
        "already_known": 0,
        "finished_at": "2026-12-01T10:01:10Z",
    },
    response_only=True,
    status_codes=["200"],
)
ROW_ERRORS_EXAMPLE = OpenApiExample(
    "Bad rows",
    value={
        "detail": "the statement was not imported",
        "code": "invalid",
        "request_id": REQUEST_ID,
        "errors": [
            {
                "row": 3,
                "field": "amount",
                "message": (
                    "'1.555': USD amounts in major units have at most 2 decimals (e.g. 250.00)"
                ),
            }
        ],
    },
    response_only=True,
    status_codes=["400"],
)
EVIDENCE_FORBIDDEN = OpenApiExample(
    "A role that may not read evidence",
    value={
        "detail": "your role may not read evidence",
        "code": "permission_denied",
        "request_id": REQUEST_ID,
    },
    response_only=True,
    status_codes=["403"],
)

STALE_PREVIEW_EXAMPLE = OpenApiExample(
    "Stale preview",
    value={
        "detail": "This preview has expired or was already replaced; nothing was launched.",
        "code": "preview_stale",
        "request_id": REQUEST_ID,
    },
    response_only=True,
    status_codes=["409"],
)
USED_PREVIEW_EXAMPLE = OpenApiExample(
    "Already launched",
    value={
        "detail": "this preview was already launched",
        "code": "preview_used",
        "request_id": REQUEST_ID,
        "run_id": RUN_ID,
    },
    response_only=True,
    status_codes=["409"],
)


SERIES = inline_serializer(
    "Series",
    {
        "campaign": s.IntegerField(),
        "metric": s.CharField(),
        "entity": s.CharField(),
        "filters": s.DictField(help_text="the filters applied (null: not given)"),
        "points": s.ListField(
            child=inline_serializer(
                "SeriesPoint",
                {
                    "run_id": s.UUIDField(),
                    "at": s.DateTimeField(help_text="the run's finish time"),
                    "hits": s.IntegerField(),
                    "n": s.IntegerField(),
                    "rate": s.FloatField(allow_null=True, help_text="null when n is 0"),
                    "low": s.FloatField(allow_null=True, help_text="Wilson 95 % (null: a mean)"),
                    "high": s.FloatField(allow_null=True),
                    "segment": s.IntegerField(help_text="index into segments"),
                },
            )
        ),
        "segments": s.ListField(
            child=inline_serializer(
                "SeriesSegment",
                {
                    "index": s.IntegerField(),
                    "comparability_key": s.CharField(),
                    "start": s.DateTimeField(),
                    "end": s.DateTimeField(),
                    "runs": s.IntegerField(),
                    "changes": s.ListField(
                        child=s.CharField(), help_text="what changed at its start"
                    ),
                },
            )
        ),
    },
)
SERIES_EXAMPLE = OpenApiExample(
    "Visibility on one platform, with a break",
    value={
        "campaign": 7,
        "metric": "visibility",
        "entity": "Acme",
        "filters": {"platform": "openai", "region": None, "device": None, "mode": None,
                    "topic": None, "question": None, "since": None, "until": None},
        "points": [
            {"run_id": RUN_ID, "at": "2026-03-01T06:10:00+00:00", "hits": 31, "n": 40,
             "rate": 0.775, "low": 0.625, "high": 0.877, "segment": 0},
            {"run_id": "6a1d4b6f-9e8c-4a4a-8b62-1c2d3e4f5a61", "at": "2026-03-02T06:12:00+00:00",
             "hits": 22, "n": 60, "rate": 0.367, "low": 0.255, "high": 0.494, "segment": 1},
        ],
        "segments": [
            {"index": 0, "comparability_key": "9f2c…", "start": "2026-03-01T06:10:00+00:00",
             "end": "2026-03-01T06:10:00+00:00", "runs": 1, "changes": []},
            {"index": 1, "comparability_key": "41ab…", "start": "2026-03-02T06:12:00+00:00",
             "end": "2026-03-02T06:12:00+00:00", "runs": 1,
             "changes": ["target added: openai/gb/desktop/web_search"]},
        ],
    },
    response_only=True,
)  # fmt: skip

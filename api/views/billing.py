"""Finance: ledger entries, accounts, a run's reconciliation, statement upload."""

from __future__ import annotations

from typing import Any

import django_filters
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from billing import imports as statement_imports
from billing.models import Account, JournalEntry, StatementImport
from billing.reconciliation import StatementError, reconcile
from billing.selectors import with_balances
from tenancy.scope import require_platform_finance

from .. import schema_docs as docs
from ..base import ApiView, ScopedList, TenantIdFilter, list_schema
from ..errors import BodyTooLarge, error_body, row_items
from ..serializers import AccountSerializer, JournalEntrySerializer
from .runs import RunView


class EntryFilter(django_filters.FilterSet):
    run = django_filters.UUIDFilter(field_name="run_id", help_text="run id")
    tenant = TenantIdFilter()

    class Meta:
        model = JournalEntry
        fields = ["kind", "run", "tenant"]


class AccountFilter(django_filters.FilterSet):
    tenant = TenantIdFilter()

    class Meta:
        model = Account
        fields = ["kind", "currency", "tenant"]


@list_schema(
    "Ledger entries",
    "Journal entries of the caller's tenants with their postings (minor units). Finance.",
    docs.LEDGER_EXAMPLE,
)
class LedgerEntries(ScopedList):
    serializer_class = JournalEntrySerializer
    filterset_class = EntryFilter
    queryset = JournalEntry.objects.select_related("tenant").prefetch_related("postings__account")
    view_permission = "billing.view_journalentry"


@list_schema(
    "Accounts",
    "Accounts of the caller's tenants with their balances. Finance.",
    docs.ACCOUNTS_EXAMPLE,
)
class Accounts(ScopedList):
    serializer_class = AccountSerializer
    filterset_class = AccountFilter
    # Balances of every kind: cached where kept, summed from postings where not.
    queryset = with_balances(Account.objects.select_related("tenant"))
    view_permission = "billing.view_account"


class RunReconciliation(RunView):
    @extend_schema(
        summary="A run's reconciliation",
        description=(
            "Per upstream task: our charge, the recorded cost and the provider statement's "
            "cost (integers in minor units, each with its currency field), with the status and "
            "difference (billing/reconciliation.py). Voided statements do not count. Finance."
        ),
        responses={200: docs.RECONCILIATION},
        examples=[docs.RECONCILIATION_EXAMPLE],
    )
    def get(self, request: Request, run_id: Any) -> Response:
        run = self.run(run_id, perm="billing.view_samplesettlement")
        report = reconcile(run_id=run.pk)
        counts: dict[str, int] = {}
        for row in report.rows:
            counts[row.status] = counts.get(row.status, 0) + 1
        return Response(
            {
                "run_id": str(run.pk),
                "rows": [row.as_dict() for row in report.rows],
                "counts": counts,
                "totals": report.totals,
            }
        )


class Statements(ApiView):
    parser_classes = [MultiPartParser]

    @property
    def max_body_bytes(self) -> int:  # type: ignore[override]
        return statement_imports.body_limit()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # From Content-Length, before the body is read, with the statement's own limit named.
        problem = statement_imports.oversized_body(request)
        if problem is not None:
            raise BodyTooLarge(problem)
        super().initial(request, *args, **kwargs)

    @extend_schema(
        summary="Upload a provider statement",
        description=(
            "multipart/form-data with `provider` (a configured platform key) and `file` (CSV: "
            "upstream_id, amount in major units such as 0.90, or amount_minor in minor units, "
            "currency, occurred_at ISO 8601 with zone), at most GEO_STATEMENT_MAX_BYTES "
            "(16 MiB by default; a 413 from Content-Length, before the body is read). "
            "Answers 202 at once: a worker imports the file, and the import's `url` shows its "
            "progress, then its statement or the rows that refused it (all or nothing). The "
            "same file again under the same provider changes nothing while its statement is "
            "not voided. Statements are the platform operator's: platform finance or "
            "superusers only (403 for a tenant's roles)."
        ),
        request=docs.STATEMENT_UPLOAD,
        responses={202: docs.STATEMENT_IMPORT, 400: docs.ROW_ERRORS},
        examples=[docs.STATEMENT_QUEUED_EXAMPLE, docs.ROW_ERRORS_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        require_platform_finance(request.user)
        upload = request.FILES.get("file")
        provider = request.data.get("provider", "")
        if upload is None:
            errors = [{"row": None, "field": "file", "message": "required"}]
            return Response(error_body("no file", "invalid", errors=errors), status=400)
        try:
            job = statement_imports.queue_import(
                provider=str(provider), upload=upload, imported_by=request.user.get_username()
            )
        except StatementError as error:
            body = error_body(
                "the statement was not imported", "invalid", errors=row_items(error.problems)
            )
            return Response(body, status=status.HTTP_400_BAD_REQUEST)
        return Response(_import_body(job), status=status.HTTP_202_ACCEPTED)


def _import_body(job: StatementImport) -> dict[str, Any]:
    body = statement_imports.progress(job)
    body["url"] = reverse("api:statement-import", args=[job.pk])
    body["errors"] = row_items(job.errors)
    return body


class StatementImportDetail(ApiView):
    @extend_schema(
        summary="A statement import's progress",
        description=(
            "`queued`, `running` (rows checked, then rows written of `rows_total`), `done` "
            "(`statement_id`; `created` false when the same file was imported before) or "
            "`failed` (`errors` names the rows; nothing was imported). Platform finance."
        ),
        responses={200: docs.STATEMENT_IMPORT},
        examples=[docs.STATEMENT_IMPORTED_EXAMPLE],
    )
    def get(self, request: Request, pk: int) -> Response:
        require_platform_finance(request.user)
        job = StatementImport.objects.filter(pk=pk).first()
        if job is None:
            raise NotFound("no statement import with this id")
        return Response(_import_body(job))

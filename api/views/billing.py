"""Finance: ledger entries, accounts, a run's reconciliation, statement upload."""

from __future__ import annotations

from typing import Any

import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from billing.models import Account, JournalEntry
from billing.reconciliation import MAX_STATEMENT_BYTES, StatementError, import_statement, reconcile
from billing.selectors import with_balances
from tenancy.scope import require_platform_finance

from .. import schema_docs as docs
from ..base import ApiView, ScopedList, TenantIdFilter, list_schema
from ..errors import error_body, row_items
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
    max_body_bytes = MAX_STATEMENT_BYTES + 64 * 1024

    @extend_schema(
        summary="Upload a provider statement",
        description=(
            "multipart/form-data with `provider` (a configured platform key) and `file` (CSV: "
            "upstream_id, amount in major units such as 0.90, or amount_minor in minor units, "
            "currency, occurred_at ISO 8601 with zone). All or nothing: a 400 names every bad "
            "row. The same file again under the same provider changes nothing while its "
            "statement is not voided. Statements are the platform operator's: platform "
            "finance or superusers only (403 for a tenant's roles)."
        ),
        request=docs.STATEMENT_UPLOAD,
        responses={201: docs.STATEMENT, 200: docs.STATEMENT, 400: docs.ROW_ERRORS},
        examples=[docs.STATEMENT_EXAMPLE, docs.ROW_ERRORS_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        require_platform_finance(request.user)
        upload = request.FILES.get("file")
        provider = request.data.get("provider", "")
        if upload is None:
            errors = [{"row": None, "field": "file", "message": "required"}]
            return Response(error_body("no file", "invalid", errors=errors), status=400)
        try:
            result = import_statement(
                provider=str(provider),
                filename=upload.name or "statement.csv",
                content=upload.read(),
                imported_by=request.user.get_username(),
            )
        except StatementError as error:
            body = error_body(
                "the statement was not imported", "invalid", errors=row_items(error.problems)
            )
            return Response(body, status=status.HTTP_400_BAD_REQUEST)
        return Response(
            {
                "statement_id": result.statement.pk,
                "created": result.created,
                "imported": result.imported,
                "already_known": result.already_known,
            },
            status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK,
        )

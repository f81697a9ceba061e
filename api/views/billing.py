"""Finance: ledger entries, accounts, a run's reconciliation, statement upload."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from billing.models import Account, JournalEntry
from billing.reconciliation import MAX_STATEMENT_BYTES, StatementError, import_statement, reconcile
from console.scope import require_somewhere, role_checked_get, scoped
from sampling.models import Run

from .. import schema_docs as docs
from ..base import ApiView
from ..errors import row_items
from ..pagination import IdCursor
from ..serializers import AccountSerializer, JournalEntrySerializer


class EntryFilter(django_filters.FilterSet):
    run = django_filters.UUIDFilter(field_name="run_id", help_text="run id")

    class Meta:
        model = JournalEntry
        fields = ["kind", "run", "tenant"]


class LedgerEntries(mixins.ListModelMixin, ApiView):
    serializer_class = JournalEntrySerializer
    pagination_class = IdCursor
    filterset_class = EntryFilter
    queryset = JournalEntry.objects.all()

    def get_queryset(self) -> QuerySet[JournalEntry]:
        require_somewhere(self.request.user, "billing.view_journalentry")
        entries = JournalEntry.objects.select_related("tenant").prefetch_related(
            "postings__account"
        )
        return scoped(entries, self.request.user)

    @extend_schema(
        summary="Ledger entries",
        description=(
            "Journal entries of the caller's tenants with their postings (minor units). Finance."
        ),
        examples=[docs.LEDGER_EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        return self.list(request)


class Accounts(mixins.ListModelMixin, ApiView):
    serializer_class = AccountSerializer
    pagination_class = IdCursor
    filterset_fields = ["kind", "currency", "tenant"]
    queryset = Account.objects.all()

    def get_queryset(self) -> QuerySet[Account]:
        require_somewhere(self.request.user, "billing.view_account")
        return scoped(Account.objects.select_related("tenant"), self.request.user)

    @extend_schema(
        summary="Accounts",
        description="Accounts of the caller's tenants with their balances. Finance.",
        examples=[docs.ACCOUNTS_EXAMPLE],
    )
    def get(self, request: Request) -> Response:
        return self.list(request)


class RunReconciliation(ApiView):
    queryset = Run.objects.all()

    @extend_schema(
        summary="A run's reconciliation",
        description=(
            "Per upstream task: our charge, the recorded cost and the provider statement's "
            "cost, with the status and difference (billing/reconciliation.py). Finance."
        ),
        responses={200: docs.RECONCILIATION},
        examples=[docs.RECONCILIATION_EXAMPLE],
    )
    def get(self, request: Request, run_id: Any) -> Response:
        perm = "billing.view_samplesettlement"
        run = role_checked_get(Run.objects.all(), request.user, perm=perm, pk=run_id)
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
            "multipart/form-data with `provider` and `file` (CSV: upstream_id, amount in minor "
            "units, currency, occurred_at ISO 8601 with zone). All or nothing: a 400 names "
            "every bad row. The same file again changes nothing. Finance."
        ),
        request=docs.STATEMENT_UPLOAD,
        responses={201: docs.STATEMENT, 200: docs.STATEMENT, 400: docs.ROW_ERRORS},
        examples=[docs.STATEMENT_EXAMPLE, docs.ROW_ERRORS_EXAMPLE],
    )
    def post(self, request: Request) -> Response:
        require_somewhere(request.user, "billing.add_upstreamstatement")
        upload = request.FILES.get("file")
        provider = request.data.get("provider", "")
        if upload is None:
            body = {
                "detail": "no file",
                "errors": [{"row": None, "field": "file", "message": "required"}],
            }
            return Response(body, status=status.HTTP_400_BAD_REQUEST)
        try:
            result = import_statement(
                provider=str(provider),
                filename=upload.name or "statement.csv",
                content=upload.read(),
            )
        except StatementError as error:
            body = {"detail": "the statement was not imported", "errors": row_items(error.problems)}
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

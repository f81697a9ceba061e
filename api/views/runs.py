"""Runs: list (filters campaign, status), status, cancel, resume, samples, report."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Prefetch, QuerySet
from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins
from rest_framework.request import Request
from rest_framework.response import Response

from analysis.models import Mention
from analysis.report_exports import render_report, stream_report
from analysis.reports import ReportIntegrityError, build_run_report
from billing.services import InsufficientFunds
from evidence.models import Capture
from pipeline.resume import ResumeRefused, resume_run
from pipeline.runs import RunAlreadyFinished, cancel_run
from sampling.models import Run, Sample
from sampling.selectors import platform_statuses, run_status, upstream_cancels
from tenancy.roles import REPORT_ROLES
from tenancy.scope import role_checked_get

from .. import schema_docs as docs
from ..base import ApiView, ScopedList, list_schema
from ..errors import Conflict, DetailedError
from ..pagination import AscendingIdCursor, NewestFirstCursor
from ..serializers import RunSerializer, SampleDetailSerializer, SampleSerializer

REPORT_TYPES = {
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}


VIEW_RUN = "sampling.view_run"
RUNS = Run.objects.select_related("tenant", "campaign")


class RunView(ApiView):
    """A view of one run, found through the caller's role on its tenant."""

    queryset = RUNS

    def run(self, run_id: Any, perm: str = VIEW_RUN, **options: Any) -> Run:
        run: Run = self.checked_object(run_id, perm=perm, **options)
        return run


class RunFilter(django_filters.FilterSet):
    campaign = django_filters.NumberFilter(field_name="campaign_id", help_text="campaign id")
    status = django_filters.ChoiceFilter(
        method="by_status",
        choices=[("running", "running"), ("finished", "finished"), ("cancelled", "cancelled")],
        help_text="running, finished or cancelled",
    )

    class Meta:
        model = Run
        fields = ["campaign", "status"]

    def by_status(self, queryset: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        if value == "cancelled":
            return queryset.exclude(cancelled_at=None)
        queryset = queryset.filter(cancelled_at=None)
        return (
            queryset.filter(finished_at=None)
            if value == "running"
            else queryset.exclude(finished_at=None)
        )


@list_schema(
    "List runs",
    "Runs of the caller's tenants, newest first; filter by campaign and status.",
    docs.RUN_LIST,
)
class RunList(ScopedList):
    serializer_class = RunSerializer
    pagination_class = NewestFirstCursor
    filterset_class = RunFilter
    queryset = Run.objects.select_related("tenant")
    view_permission = VIEW_RUN


def run_body(run: Run) -> dict[str, Any]:
    status = run_status(run_id=run.pk)
    return {
        **RunSerializer(run).data,
        **status.as_dict(),
        "platforms": {p: s.as_dict() for p, s in platform_statuses(run_id=run.pk).items()},
        "upstream_cancel": upstream_cancels(run_id=run.pk).as_dict(),
    }


class RunDetail(RunView):
    @extend_schema(
        summary="Run status",
        description=(
            "The status aggregation (sampling/selectors.py `run_status`): outcome, "
            "planned/succeeded/failed/invalid/review/pending/uncertain/parked, counts per "
            "layer, and the same per platform; after a cancel, what the upstreams were asked "
            "to stop and what they acknowledged (`upstream_cancel`)."
        ),
        responses={200: docs.RUN_STATUS},
        examples=[docs.RUN_STATUS_EXAMPLE],
    )
    def get(self, request: Request, run_id: Any) -> Response:
        return Response(run_body(self.run(run_id)))


class RunCancel(RunView):
    @extend_schema(
        summary="Cancel a run",
        description=(
            "Samples not yet accepted upstream fail as cancelled and their share of the hold "
            "is released; work already accepted finishes. Idempotent on a cancelled run; a "
            "run that already finished is a 409 (`run_finished`) and stays as it is "
            "(operators)."
        ),
        request=None,
        responses={200: docs.CANCEL, 409: docs.ERROR},
        examples=[docs.CANCEL_EXAMPLE],
    )
    def post(self, request: Request, run_id: Any) -> Response:
        run = self.run(run_id, perm="sampling.change_run")
        try:
            cancelled = cancel_run(
                run_id=run.pk, reason=f"cancelled through the API by {request.user}"
            )
        except RunAlreadyFinished as error:
            raise Conflict(str(error), code="run_finished") from None
        run.refresh_from_db()
        return Response({"cancelled_samples": cancelled, **run_body(run)})


class RunResume(RunView):
    @extend_schema(
        summary="Resume a run",
        description=(
            "Ask again every sample that is not valid and completed (pipeline/resume.py). "
            "409 while samples are in flight; 402 when released shares cannot be held again."
        ),
        request=None,
        responses={200: docs.RESUME, 402: docs.ERROR, 409: docs.ERROR},
        examples=[docs.RESUME_EXAMPLE],
    )
    def post(self, request: Request, run_id: Any) -> Response:
        run = self.run(run_id, perm="sampling.change_run")
        try:
            plan = resume_run(run_id=run.pk, actor=f"api:{request.user}")
        except ResumeRefused as error:
            raise Conflict(str(error), code="resume_refused") from None
        except InsufficientFunds as error:
            raise DetailedError(
                402,
                str(error),
                code="funds_short",
                shortfall=error.required - error.available,
                currency=error.currency,
            ) from None
        return Response({"resume_no": plan.resume_no, **plan.as_dict()})


def _samples() -> QuerySet[Sample]:
    captures = Capture.objects.prefetch_related("evidence_objects")
    return Sample.objects.prefetch_related(Prefetch("captures", queryset=captures))


class SampleFilter(django_filters.FilterSet):
    class Meta:
        model = Sample
        fields = ["platform", "collection_state", "analysis_state", "validity"]


class RunSamples(mixins.ListModelMixin, ApiView):
    serializer_class = SampleSerializer
    pagination_class = AscendingIdCursor
    filterset_class = SampleFilter
    queryset = Sample.objects.all()

    def get_queryset(self) -> QuerySet[Sample]:
        if getattr(self, "swagger_fake_view", False):
            return Sample.objects.none()
        user, run_id = self.request.user, self.kwargs["run_id"]
        run = role_checked_get(RUNS, user, perm="sampling.view_sample", pk=run_id)
        return _samples().filter(run_id=run.pk)

    @extend_schema(
        summary="Samples of a run",
        description=(
            "Identity fields, the four layers and the queue state, validity and its reason, "
            "attempts, and links to the evidence (downloads check the role again)."
        ),
        examples=[docs.SAMPLE_LIST],
    )
    def get(self, request: Request, run_id: Any) -> Response:
        return self.list(request)


class SampleDetail(ApiView):
    serializer_class = SampleDetailSerializer
    queryset = (
        _samples()
        .select_related("question_revision")
        .prefetch_related(
            "captures__citations", Prefetch("mentions", queryset=Mention.objects.order_by("id"))
        )
    )

    @extend_schema(
        summary="One sample",
        description=(
            "The sample with its question, answer, citations and mentions (newest analysis)."
        ),
        examples=[docs.SAMPLE_DETAIL],
    )
    def get(self, request: Request, pk: int) -> Response:
        sample = self.checked_object(pk, perm="sampling.view_sample")
        return Response(SampleDetailSerializer(sample).data)


class RunReport(RunView):
    @extend_schema(
        summary="The run's auditable report",
        description=(
            "json, csv or xlsx (analysis/reports.py). Refused with a 409 naming each "
            "difference when the numbers do not add up (conservation, double count, second "
            "count). Operators and analysts."
        ),
        parameters=[
            OpenApiParameter("format", str, enum=list(REPORT_TYPES), default="json"),
        ],
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            (200, "text/csv"): OpenApiTypes.STR,
            (200, REPORT_TYPES["xlsx"]): OpenApiTypes.BINARY,
            409: docs.ERROR,
        },
        examples=[docs.REPORT_REFUSED],
    )
    def get(self, request: Request, run_id: Any) -> HttpResponse | StreamingHttpResponse:
        run = self.run(run_id, roles=REPORT_ROLES)
        fmt = request.query_params.get("format", "json")
        if fmt not in REPORT_TYPES:
            raise DetailedError(
                400,
                "unknown format",
                code="invalid",
                errors=[
                    {"field": "format", "message": f"{fmt[:20]!r} is not one of json, csv, xlsx"}
                ],
            )
        try:
            report = build_run_report(run_id=run.pk)
        except ReportIntegrityError as error:
            raise DetailedError(
                409, str(error), code="report_inconsistent", differences=error.differences
            ) from None
        response: HttpResponse | StreamingHttpResponse = (
            StreamingHttpResponse(stream_report(report, fmt), content_type=REPORT_TYPES[fmt])
            if fmt == "csv"
            else HttpResponse(render_report(report, fmt), content_type=REPORT_TYPES[fmt])
        )
        if fmt != "json":
            response["Content-Disposition"] = f'attachment; filename="report-{run.pk}.{fmt}"'
        return response

"""The whole campaign, as its change form would save it, held to the plan preview's rules
(`sampling.planning.parse_campaign_spec`, the one definition) before anything is written.

The campaign's fields, its competitors, targets and questions are separate forms of one page;
only together do they say whether the campaign can be planned (no question, no target, the
same question twice, a plan over the limit). The last inline formset runs this check once the
others are validated: each problem goes beside its row or at the top of its list, in the
words the preview would use, and the page is not saved.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms

from sampling.models import Campaign, Competitor, PlatformTarget, Question
from sampling.planning import PlanError, parse_campaign_spec

# The campaign's own fields: CampaignForm checks them (with the same rule functions).
_FORM_FIELDS = ("tenant", "name", "brand", "repeats", "priority", "screenshot_policy")
_ROW = re.compile(r"(questions|targets|competitors)\[(\d+)\](?:\.(\w+))?")


class CheckedFormSet(forms.BaseInlineFormSet):
    """An inline formset that, when it is the page's last one, checks the whole campaign."""

    whole_campaign: CampaignCheck | None = None

    def clean(self) -> None:
        super().clean()
        if self.whole_campaign is not None:
            self.whole_campaign.check(self)


def _live(formset: Any) -> list[Any]:
    """The formset's forms that will be saved (not deleted, not left empty)."""
    kept = []
    for form in formset.forms:
        if not form.has_changed() and form.instance.pk is None:
            continue
        if formset.can_delete and formset._should_delete_form(form):
            continue
        kept.append(form)
    return kept


def _value(form: Any, name: str) -> Any:
    cleaned = getattr(form, "cleaned_data", None) or {}
    return cleaned.get(name, getattr(form.instance, name, None))


class CampaignCheck:
    def __init__(self, campaign: Campaign, formsets: list[Any]) -> None:
        self.campaign = campaign
        self.by_model = {formset.model: formset for formset in formsets}
        self.rows: dict[str, list[Any]] = {}

    def check(self, last: Any) -> None:
        campaign = self.campaign
        if campaign.tenant_id is None or campaign.brand_id is None:
            return  # the campaign's own form refused them and says why
        try:
            parse_campaign_spec(self._data(), refuse_duplicates=True)
        except PlanError as error:
            located = [(w, m) for w, m in error.located if w.split(".")[0] not in _FORM_FIELDS]
            if located:
                here = [text for w, m in located if (text := self._place(w, m, last))]
                raise forms.ValidationError(
                    here
                    or "The campaign was not saved: the plan preview would refuse it "
                    "(each problem is shown beside its row)."
                ) from None

    def _data(self) -> dict[str, Any]:
        campaign = self.campaign
        competitors = self._forms("competitors")
        targets = self._forms("targets")
        return {
            "tenant": campaign.tenant.slug,
            "name": campaign.name,
            "brand": {
                "name": campaign.brand.name,
                "aliases": campaign.brand.aliases,
                "domains": campaign.brand.domains,
            },
            "competitors": [
                {
                    "name": _value(f, "name") or "",
                    "aliases": _value(f, "aliases") or [],
                    "domains": _value(f, "domains") or [],
                }
                for f in competitors
            ],
            "questions": self._questions(),
            "targets": [
                {k: _value(f, k) or "" for k in ("platform", "device", "region", "mode")}
                for f in targets
            ],
            "repeats": campaign.repeats,
            "screenshot_policy": campaign.screenshot_policy,
            "priority": campaign.priority,
        }

    def _forms(self, name: str) -> list[Any]:
        formset = self.by_model.get(self._model(name))
        self.rows[name] = [] if formset is None else _live(formset)
        return self.rows[name]

    def _model(self, name: str) -> type[Any]:
        models: dict[str, type[Any]] = {
            "competitors": Competitor,
            "targets": PlatformTarget,
            "questions": Question,
        }
        return models[name]

    def _questions(self) -> list[str]:
        """The active questions in position order; with no question inline on the page (a
        large campaign, edited in the question list) the stored ones."""
        if Question not in self.by_model:
            self.rows["questions"] = []
            if self.campaign.pk is None:
                return []
            stored = self.campaign.questions.filter(is_active=True).select_related(
                "current_revision"
            )
            return [q.current_revision.text for q in stored if q.current_revision]
        active = [f for f in self._forms("questions") if _value(f, "is_active")]
        active.sort(key=lambda f: (_value(f, "position") is None, _value(f, "position") or 0))
        self.rows["questions"] = active
        return [str(_value(f, "text") or "") for f in active]

    def _place(self, where: str, message: str, last: Any) -> str:
        """Beside its row when it names one, else at the top of its list. Returns the text
        when it belongs to the `last` formset, whose clean raises it (its list of errors is
        replaced by what clean raises)."""
        match = _ROW.fullmatch(where)
        if match:
            rows = self.rows.get(match.group(1), [])
            index = int(match.group(2))
            if index < len(rows):
                field = match.group(3) or None
                form = rows[index]
                if not form.errors:  # a row its own form refused already says why, once
                    form.add_error(field if field in form.fields else None, _sentence(message))
                return ""
        name = where.split("[")[0]
        formset = self.by_model.get(self._model(name)) if name in self.rows else None
        text = _sentence(message if name in ("questions", "targets") else f"{where}: {message}")
        if formset is None or formset is last:
            return text
        formset.non_form_errors().append(text)
        return ""


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")

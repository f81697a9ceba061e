from __future__ import annotations

import pytest

from billing.services import NoActivePrice
from sampling.models import Run
from tests.billing.conftest import COLLECTOR, launch


@pytest.mark.django_db
def test_without_a_price_version_the_launch_is_refused_and_rolled_back() -> None:
    with pytest.raises(NoActivePrice, match="no price version is in effect"):
        launch(questions=1, targets=[COLLECTOR])
    assert not Run.objects.exists()

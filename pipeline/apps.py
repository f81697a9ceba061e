from django.apps import AppConfig


class PipelineConfig(AppConfig):
    name = "pipeline"
    verbose_name = "Pipeline"

    def ready(self) -> None:
        from .runs import held_runs_every, settle_held_runs
        from .sweeps import register_sweep

        # Finished runs still holding money with no settlement in progress (the dispatcher's
        # sweeps): a lost run-finished event is repaired from the database, not the broker.
        register_sweep(name="pipeline.held_runs", sweep=settle_held_runs, every=held_runs_every)

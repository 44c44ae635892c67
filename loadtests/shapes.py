"""Step load: add users in equal steps, hold each step, then stop.

Use it beside the locustfile (Locust picks up a ``LoadTestShape`` from any of the files it is given)::

    locust -f loadtests/locustfile.py,loadtests/shapes.py --headless \\
        --step-users 12 --step-seconds 30 --steps 4

or ``python -m loadtests.run --step ...``. Each step's statistics show where latency starts to climb: compare
the per-backend p99 in the CSV history (``*_stats_history.csv``) across steps.
"""

from __future__ import annotations

from locust import LoadTestShape, events
from locust.argument_parser import LocustArgumentParser


@events.init_command_line_parser.add_listener
def _add_arguments(parser: LocustArgumentParser) -> None:
    parser.add_argument("--step-users", type=int, default=12, help="users added at each step")
    parser.add_argument("--step-seconds", type=float, default=30.0, help="how long each step lasts")
    parser.add_argument("--steps", type=int, default=4, help="number of steps; the test stops after the last")
    parser.add_argument("--step-spawn-rate", type=float, default=12.0, help="users started per second")


class StepLoadShape(LoadTestShape):
    """``steps`` steps of ``step_users`` more users each, ``step_seconds`` long; then the test stops.

    The parameters come from the command line (``--step-users`` etc.); the class attributes are the defaults
    when the shape is used without Locust's parser (tests, the library API).
    """

    step_users = 12
    step_seconds = 30.0
    steps = 4
    spawn_rate = 12.0

    def _parameters(self) -> tuple[int, float, int, float]:
        options = self.runner.environment.parsed_options if self.runner is not None else None
        if options is None:
            return self.step_users, self.step_seconds, self.steps, self.spawn_rate
        return (
            int(getattr(options, "step_users", self.step_users)),
            float(getattr(options, "step_seconds", self.step_seconds)),
            int(getattr(options, "steps", self.steps)),
            float(getattr(options, "step_spawn_rate", self.spawn_rate)),
        )

    def users_at(self, run_time: float) -> int | None:
        """Users wanted ``run_time`` seconds into the test; ``None`` once the last step is over."""
        step_users, step_seconds, steps, _ = self._parameters()
        if step_users < 1 or step_seconds <= 0 or steps < 1:
            raise ValueError(
                f"step load needs step_users >= 1, step_seconds > 0 and steps >= 1; got "
                f"{step_users}, {step_seconds}, {steps}"
            )
        step = int(run_time // step_seconds)
        if step >= steps:
            return None
        return (step + 1) * step_users

    def tick(self) -> tuple[int, float] | None:
        users = self.users_at(self.get_run_time())
        if users is None:
            return None
        return users, self._parameters()[3]

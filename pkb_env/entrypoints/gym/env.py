"""`ParallelKernelEnv`: one episode is one task; each step judges one candidate module.

The env is small on purpose: the episode's rules are pkb_env/episode.py's (the same for every door), the
judging is its client's (pkb_env/client.py), the reward `pkb_env.rewards`'. It turns a judged turn into
(observation, reward, terminated, truncated, info) and keeps Gymnasium's contract around it.
"""
from __future__ import annotations

from typing import Any, Sequence

import gymnasium

from pkb_env import spaces as S
from pkb_env.client import JudgeClient, LocalClient
from pkb_env.config import JudgeConfig
from pkb_env.episode import Episode, Turn, task_pool
from pkb_env.rewards import TurnCredit, load_reward


class ParallelKernelEnv(gymnasium.Env[dict, str]):
    """Write a faster multi-rank implementation of a PyTorch + torch.distributed reference.

    ## Observation (`Dict`)
    | key          | space                  | meaning                                                         |
    |--------------|------------------------|-----------------------------------------------------------------|
    | prompt       | Text(64k, printable)   | everything a model needs this turn, ready for a chat template    |
    | task_id      | Text(64)               | the task's name, e.g. "all_reduce"                               |
    | reference    | Text(200k)             | the reference module, verbatim                                   |
    | topology     | Text(8k)               | executor, world size, interconnect, bandwidths, engines          |
    | feedback     | Text(8k)               | the judge's report on the previous action ("" after reset)       |
    | turn         | Discrete(max_turns+1)  | actions taken so far in this episode                             |
    | world_size   | Discrete(4097)         | ranks the solution runs on                                       |
    | best_speedup | Box(0, 1e4, ())        | best measured speedup of a correct action this episode (0: none) |

    ## Action
    Text: a raw model completion (the last ```python block defining `solution` is used) or bare code.

    ## Reward
    From the reward function named by `reward` (configs/rewards/; default: shaped, in [-1, 1]) applied
    to the EvaluationRecord. `turn_credit="improvement"` pays only the gain over the best earlier turn.

    ## Episode end (pkb_env/episode.py)
    terminated: a correct action reached `target_speedup` (or was correct where speed is not measured): its
    speedup at least the target, and the lower end of its 90% interval from the step's paired bursts too
    where it has one (a speedup whose pairs straddle the target has not shown it reached it).
    truncated: `max_turns` actions were taken without that.
    After `terminated`, call `reset()`. A further `step()` is still judged (the record is real) but warns
    once per episode, as Gymnasium's own environments do: what it returns belongs to no episode. After
    `max_turns` actions `step()` raises until `reset()` (the observation's turn cannot go past max_turns).
    A step the judge itself could not judge (verdict judge_error: never the code's fault) is a turn that earns
    the reward's unjudged value (0 for the shipped rewards); its feedback says so.

    ## Arguments
    task: a task name, a list of names to draw from at reset, or None for the whole suite.
    config (JudgeConfig: every judge setting; default JudgeConfig()), and as shorthands that override it:
    world_size, executor ("auto" | "cpu" | "cuda" | "cuda-emulated"), preset ("tiny" | "bench" | "large"),
    dtype (None: the preset's). max_turns, target_speedup, reward (config name or YAML path),
    turn_credit ("turn" | "improvement"), render_mode (None | "ansi").
    client: a JudgeClient to judge on instead (a LocalClient or a JudgePool, shared with other envs: the env then
    neither makes nor closes one, and `config` and its shorthands must be left out).

    The env's judge is `env.unwrapped.client` (pkb_env/client.py; `client.run(fn)` reaches the local service).

    .. versionchanged:: 0.2 `judge_settings` became `config` (a JudgeConfig holds every setting).
    .. versionchanged:: 0.3 `env.unwrapped.judge` (a JudgeService) became `env.unwrapped.client` (a JudgeClient);
       a judge failure is a judge_error turn instead of an exception; the module moved to pkb_env.entrypoints.gym.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # fps: text frames, one per step

    def __init__(self, task: str | Sequence[str] | None = "all_reduce", world_size: int | None = None,
                 executor: str | None = None, preset: str | None = None, dtype: str | None = None, max_turns: int = 4,
                 target_speedup: float = 1.0, reward: str = "default", turn_credit: str = "turn",
                 config: JudgeConfig | None = None, render_mode: str | None = None, client: JudgeClient | None = None):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use None or 'ansi'")
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        shorthands = {"world_size": world_size, "executor": executor, "preset": preset, "dtype": dtype}
        if client is not None and (config is not None or any(v is not None for v in shorthands.values())):
            raise ValueError("pass either client or config (and its shorthands): a client judges with its own "
                             "config (client.config)")
        self.max_turns, self.target_speedup = max_turns, target_speedup
        self.turn_credit = TurnCredit(turn_credit)
        self.reward_fn = load_reward(reward)
        self.render_mode = render_mode
        self._own_client = client is None
        if client is None:
            config = (config or JudgeConfig()).replace(**{k: v for k, v in shorthands.items() if v is not None})
            client = LocalClient(config)
        self.client = client
        try:
            self.task_pool = task_pool(self.client, task)
        except Exception:
            self.close()
            raise
        self.observation_space = S.observation_space(max_turns)
        self.action_space = S.action_space()
        self._episode: Episode | None = None
        self._warned_after_end = False

    @property
    def world_size(self) -> int:
        return self.client.config.world_size

    # -- Gymnasium API -----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode. options: {"task": name} picks the task (else drawn from the pool)."""
        super().reset(seed=seed)
        options = dict(options or {})
        name = options.pop("task", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; the only option is 'task'")
        if name is None:
            name = self.task_pool[int(self.np_random.integers(len(self.task_pool)))]
        self._episode = Episode(self.client, name, self.reward_fn, self.max_turns, self.target_speedup,
                                self.turn_credit.value)   # TaskError naming the fix
        self._warned_after_end = False
        observation = self._episode.observation()          # makes the judge ready: the first step need not wait
        return observation, {"task": name, "world_size": self.world_size, "executor": self.client.info.name}

    def step(self, action: str):
        """Judge `action`. Returns (obs, reward, terminated, truncated, info).

        info keys:
          correct (bool), verdict (str), stage (str: last stage reached), error (str | None),
          speedup (float | None: reference time / candidate time; None if not measured or not trusted),
          speedup_interval ((low, high) | None: its 90% interval from the step's paired bursts),
          roofline_fraction (float | None: the cost model's bound / measured time; above 1 only if the
            model or the measurement is wrong, which the timing then reports as suspect),
          reward_terms (dict: every term of the reward), turn_reward (float: before turn credit),
          turn (int: turns taken in this episode, this one included),
          flags (list[str]: screen/runtime findings as "code: message"),
          stage_seconds (dict: wall time per stage), feedback (str), record (EvaluationRecord).
        """
        episode = self._episode
        if episode is None:
            raise RuntimeError("step() called before reset(); call env.reset() to start an episode")
        episode.check_open(after_solved=True)
        if episode.solved and not self._warned_after_end:
            self._warned_after_end = True
            gymnasium.logger.warn("You are calling 'step()' even though this episode already returned terminated=True. "
                                  "You should call 'reset()' once you receive 'terminated=True': this step is "
                                  "judged, but its reward and observation belong to no episode.")
        turn = episode.step(action, after_solved=True)
        return episode.observation(turn.record.feedback), turn.reward, turn.terminated, turn.truncated, turn.info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        episode = self._episode
        if episode is None:
            return "pkb-env: no episode (call reset)\n"
        head = (f"[{episode.task} | world {self.world_size} | {self.client.info.name} | "
                f"turn {episode.turns}/{self.max_turns}]")
        last: Turn | None = episode.last
        if last is None:
            return head + " waiting for the first action\n"
        return f"{head} verdict={last.record.verdict.value} reward={last.reward:+.3f}\n{last.record.feedback}\n"

    def close(self) -> None:
        """Stop every rank process and remove the judge's files (a client the env made; one given is the caller's)."""
        if self._own_client:
            self.client.close()

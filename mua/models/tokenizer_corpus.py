"""Training text for the tiny tokenizer: project prose plus seeded synthetic conversations.

Built only from text in this module (English about the project, chat conversations with tool
calls, JSON, numbers, a little Python), so regenerating the tokenizer gives the same files however
the repository changes. Not here: datasets or downloaded text, a tokenizer good for real models.
"""

from __future__ import annotations

import json
import random

PROSE = """
mua trains language model agents with reinforcement learning on multi-turn conversations.
An agent talks to a simulated user and calls tools; a gym scores what happens and the trainer
turns those scores into advantages and a policy update. A recipe is a YAML file with sections
for the model, the data, the gym, the user simulator, the rollout engine, the algorithm, the
optimizer, parallelism, checkpoints and tracking. Every section is validated before anything
starts, and an unknown key is an error that names the key and suggests the closest valid one.
The trainer sees only token ids. Each trajectory keeps its token ids, the source of every token,
a loss mask that is one only on tokens the policy sampled, the sampling log probabilities, turn
boundaries, per-turn rewards and the reason the episode ended. New user, tool and environment
messages are rendered through the chat template as a suffix, and the whole conversation is
rendered again at the end to check that nothing drifted.
Group relative policy optimization samples several answers for the same prompt and compares
each reward with the mean of its group. Proximal policy optimization learns a value function and
uses generalized advantage estimation. Both clip the probability ratio, can add a penalty on the
divergence from a reference policy, and average the loss over tokens or sequences.
Rollout engines generate tokens with log probabilities, accept new weights after each update,
and can sleep to free memory while the trainer runs. The reference engine uses transformers on
the CPU or a GPU; a faster engine runs on GPUs. Weights move from the trainer to the engine as
named tensors. Checkpoints are written atomically: first to a temporary name, then renamed.
A gym resets with a task and returns the first messages and the tool schemas. Each step takes
the assistant message, runs the tool calls it contains, asks the user simulator for a reply,
and returns the new messages, the reward for the turn, whether the episode is done, and extra
information. Tools are typed Python functions; their JSON schema is derived from the signature
and the docstring. A scripted user follows rules and is deterministic; a language model user
calls any OpenAI compatible endpoint with timeouts, retries and a bounded number of requests.
Evaluation runs the same loop without updates and reports success rate, mean reward, pass at k,
the number of turns and tool calls, and the reasons episodes ended. Metrics go to the console
and to MLflow from rank zero only. Errors caused by the user print one clear line and exit with
code two; runtime failures exit with code one. Run the tests with pytest; they are offline.
"""

CODE = '''
def step(self, action: AgentAction) -> StepResult:
    """Run the tool calls of one assistant message and return the observations."""
    messages = []
    for call in action.tool_calls:
        result = self.dispatch(call.name, call.arguments)
        messages.append({"role": "tool", "content": json.dumps(result)})
    return StepResult(messages=messages, reward=0.0, done=False, info={})

class TrainRecipe(Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    algo: GRPOConfig | PPOConfig | SFTConfig = Field(discriminator="kind")
    optim: OptimConfig = Field(default_factory=OptimConfig)

for step_index in range(num_steps):
    batch = rollout.collect(tasks, num_samples_per_task=8, max_turns=4)
    advantages = (rewards - rewards.mean(dim=-1, keepdim=True)) / (rewards.std() + 1e-6)
    loss = -(torch.min(ratio * advantages, ratio.clamp(1 - 0.2, 1 + 0.2) * advantages) * mask).sum()
    loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
    logger.info("step %d loss %.4f reward %.3f", step_index, loss.item(), reward.mean())
'''

USER_LINES = [
    "Hi, I need help with my order.",
    "What is the weather in {city} tomorrow?",
    "Can you book a table for {n} people at 7 pm?",
    "Please compute {a} + {b} and explain the steps.",
    "I want to return the {item} I bought last week.",
    "How many {item}s are left in stock?",
    "Find me a flight from {city} to {city2} on Monday.",
    "What is {a} times {b}?",
    "My account number is {n}{a}. Can you check my balance?",
    "Thanks, that is all for today.",
    "Could you change the delivery address to {n} Main Street, {city}?",
    "Is the {item} available in blue?",
]

ASSISTANT_LINES = [
    "Sure, let me look that up for you.",
    "I found the following result: {result}.",
    "The answer is {c}.",
    "Your order has been updated. Is there anything else I can help with?",
    "I could not find a {item} with that id. Could you check the number?",
    "Let me think about this step by step. First, {a} plus {b} is {c}.",
    "The weather in {city} will be {weather} with a high of {n} degrees.",
    "Done! I booked the table for {n} people.",
]

TOOL_NAMES = {
    "get_weather": ("city", "day"),
    "search_flights": ("origin", "destination", "date"),
    "get_order": ("order_id",),
    "update_address": ("order_id", "address"),
    "calculator": ("expression",),
    "check_stock": ("item", "color"),
    "book_table": ("restaurant", "people", "time"),
    "get_balance": ("account_id",),
}

WORDS = """
the of and to in is that for it as with was on be by this are or from at an not have which
but all they one can had there were their more will would when who what about if out some
them into only other time new could these two may first then any like now over such our
make than been its most after also made many where well way even back much good very through
just years work long people take still own should between same another know while last might
great old year off come since against under never world life both few those always show
large often together ask house point home read hand high put end does number part again
place small found help because kind need turn want money world change city name follow agent
answer reward policy model train token batch learn value step update loss gradient sample
user tool call result order price item store ticket flight hotel weather today tomorrow
morning evening night week month account balance payment refund return address delivery
search book check cancel confirm available please thanks sorry problem question simple hard
water table chair window door paper letter music story game school student teacher doctor
garden river mountain ocean island forest animal family friend country language science
history market company office computer program function variable string list error file
server client request response message session memory engine process thread network
simulate environment episode trajectory advantage critic reference divergence estimate
configure recipe section override validate launch resume checkpoint merge evaluate metric
green yellow purple orange brown black white silver golden bright dark quick slow early late
happy careful strong gentle quiet loud clean fresh heavy light warm cold empty full open close
""".split()

CITIES = ["Paris", "Berlin", "Tokyo", "Lima", "Cairo", "Oslo", "Austin", "Seoul", "Lagos", "Rome"]
ITEMS = ["laptop", "phone", "jacket", "lamp", "chair", "camera", "book", "bottle", "shoe", "desk"]
WEATHER = ["sunny", "rainy", "cloudy", "windy", "snowy"]


def _fill(template: str, rng: random.Random) -> str:
    a, b = rng.randint(0, 999), rng.randint(0, 99)
    city, city2 = rng.sample(CITIES, 2)
    return template.format(
        a=a,
        b=b,
        c=a + b,
        n=rng.randint(1, 12),
        city=city,
        city2=city2,
        item=rng.choice(ITEMS),
        weather=rng.choice(WEATHER),
        result=rng.choice(ITEMS),
    )


def _tool_call(rng: random.Random) -> tuple[str, dict]:
    name = rng.choice(sorted(TOOL_NAMES))
    args = {}
    for param in TOOL_NAMES[name]:
        args[param] = rng.choice([rng.choice(CITIES), rng.choice(ITEMS), rng.randint(1, 5000)])
    return name, args


def _conversation(rng: random.Random) -> str:
    """One conversation in the chat format the tiny tokenizer's template produces."""
    parts = ["<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"]
    for _ in range(rng.randint(1, 4)):
        parts.append(f"<|im_start|>user\n{_fill(rng.choice(USER_LINES), rng)}<|im_end|>\n")
        reply = _fill(rng.choice(ASSISTANT_LINES), rng)
        if rng.random() < 0.5:
            name, args = _tool_call(rng)
            call = json.dumps({"name": name, "arguments": args})
            parts.append(f"<|im_start|>assistant\n<tool_call>\n{call}\n</tool_call><|im_end|>\n")
            result = json.dumps({"status": "ok", "value": rng.randint(0, 10000)})
            parts.append(
                f"<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n"
            )
        if rng.random() < 0.2:
            reply = f"<think>\n{_fill(rng.choice(ASSISTANT_LINES), rng)}\n</think>\n\n{reply}"
        parts.append(f"<|im_start|>assistant\n{reply}<|im_end|>\n")
    return "".join(parts)


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice([".", ".", "?", "!", ","])


def _code_line(rng: random.Random) -> str:
    name = "_".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
    arg = rng.choice(WORDS)
    kind = rng.choice(["int", "str", "float", "bool", "list[str]", "dict[str, int]"])
    return rng.choice(
        [
            f"def {name}({arg}: {kind}) -> {kind}:",
            f"    {name} = self.{arg}.get({arg!r}, None)",
            f'    return {{"{name}": {arg}, "count": len({arg}s)}}',
            f"{name}.{arg}: {rng.randint(0, 512)}  # {rng.choice(WORDS)} {rng.choice(WORDS)}",
        ]
    )


def corpus_lines(num_conversations: int = 3000, seed: int = 0) -> list[str]:
    """The full training corpus as a list of documents, identical for identical arguments."""
    rng = random.Random(seed)
    docs = [p.strip() for p in PROSE.split("\n") if p.strip()]
    docs += [CODE] * 3
    docs += [_conversation(rng) for _ in range(num_conversations)]
    docs += [" ".join(str(rng.randint(0, 10**6)) for _ in range(40)) for _ in range(50)]
    docs += [_sentence(rng) for _ in range(4000)]
    docs += [_code_line(rng) for _ in range(3000)]
    return docs

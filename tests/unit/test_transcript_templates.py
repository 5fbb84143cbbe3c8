"""The transcript delta path under the chat templates of real model families (written out here,
no download): Qwen2.5 (merges consecutive tool results), Qwen3 (drops reasoning of earlier turns)
and Llama 3.1 (header tokens, tools in the first user turn, one call per turn)."""

from __future__ import annotations

import random

import pytest
from test_transcript import TOOLS, add_call_and_result, build_by_delta_path, random_conversation

from mua.models import load_tokenizer, render_ids
from mua.rollout.transcript import ChatRenderer, check_drift, template_messages

QWEN25_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\n<tool_response>\n' }}{{- message.content }}{{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""

QWEN3_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}{%- set content = message.content %}{%- else %}{%- set content = '' %}{%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}{{- '\n' }}{%- endif %}
                {%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}
                {{- '<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\n<tool_response>\n' }}{{- content }}{{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
"""

LLAMA31_TEMPLATE = r"""{{- bos_token }}
{%- if custom_tools is defined %}{%- set tools = custom_tools %}{%- endif %}
{%- if not tools_in_user_message is defined %}{%- set tools_in_user_message = true %}{%- endif %}
{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}{{- "Environment: ipython\n" }}{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools_in_user_message and not tools is none %}
    {%- set first_user_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\n\n" }}{%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}{{- raise_exception("This model only supports single tool-calls at once!") }}{%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}{{- message.content | tojson }}{%- else %}{{- message.content }}{%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}
"""

LLAMA_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def family_tokenizer(template: str, llama: bool = False):
    """The tiny tokenizer dressed up with another family's template (and its special tokens)."""
    from tokenizers import AddedToken

    tok = load_tokenizer("tiny:qwen3-1m")
    if llama:
        tok.add_tokens(
            [AddedToken(t, special=True, normalized=False) for t in LLAMA_SPECIALS],
            special_tokens=True,
        )
        tok.bos_token = "<|begin_of_text|>"
        tok.eos_token = "<|eot_id|>"
    tok.chat_template = template
    return tok


@pytest.mark.parametrize("name", ["qwen2.5", "llama3.1"])
def test_prefix_stable_families_delta_equals_full_render(name):
    llama = name == "llama3.1"
    tok = family_tokenizer(LLAMA31_TEMPLATE if llama else QWEN25_TEMPLATE, llama=llama)
    renderer = ChatRenderer(tok, TOOLS)
    assert renderer.stop_text == ("<|eot_id|>" if llama else "<|im_end|>")
    assert not renderer.rewrites_history
    rng = random.Random(7)
    for case in range(150):
        # Llama 3.1 takes one call per turn and drops text next to it; it also needs a system turn
        # and a first user turn when tools are given.
        msgs = random_conversation(
            rng, max_calls=1 if llama else 3, text_with_calls=not llama, env_role=True
        )
        tools = TOOLS if rng.random() < 0.5 else []
        builder, _ = build_by_delta_path(tok, msgs, tools, parser="hermes")
        ends_with_prompt = msgs[-1]["role"] != "assistant"
        full = render_ids(
            tok, template_messages(msgs), tools or None, add_generation_prompt=ends_with_prompt
        )
        stream = builder.token_ids
        assert stream == full[: len(stream)], f"{name} conversation {case}"
        assert check_drift(builder, msgs, ends_with_prompt) is None, f"{name} conversation {case}"
        stop_ids = set(builder.renderer.stop_token_ids())
        for start, next_start in zip(
            builder.turn_starts, builder.turn_starts[1:] + [None], strict=False
        ):
            turn_ids = [
                i for i in range(start, next_start or len(stream)) if builder.turn_index[i] >= 0
            ]
            assert stream[turn_ids[-1]] in stop_ids and builder.loss_mask[turn_ids[-1]] == 1


def test_llama_assistant_turns_render_calls_in_llama_json_and_end_with_eot():
    tok = family_tokenizer(LLAMA31_TEMPLATE, llama=True)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    msgs += add_call_and_result()
    renderer = ChatRenderer(tok, TOOLS)
    text = renderer.assistant_text(msgs[2])
    assert text == '{"name": "add", "parameters": {"a": 1}}<|eot_id|>'
    assert (
        renderer.followup_text(msgs[3:])
        == '<|start_header_id|>ipython<|end_header_id|>\n\n"2"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'
    )


def test_qwen3_history_rewrite_is_detected_and_the_stream_keeps_earlier_reasoning():
    tok = family_tokenizer(QWEN3_TEMPLATE)
    renderer = ChatRenderer(tok, [])
    assert renderer.rewrites_history
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "<think>\nfirst reasoning\n</think>\n\nfirst answer"},
        {"role": "user", "content": "second question"},
        {"role": "assistant", "content": "<think>\nsecond reasoning\n</think>\n\nsecond answer"},
        {"role": "user", "content": "third"},
    ]
    builder, rebuilt = build_by_delta_path(tok, msgs, [])
    text = tok.decode(builder.token_ids)
    # The policy saw its own earlier reasoning: the stream keeps it, verbatim.
    assert "first reasoning" in text and "second reasoning" in text
    assert rebuilt[2]["content"] == msgs[2]["content"]
    # The template's one-shot rendering drops it, so comparing against that would flag every
    # multi-turn Qwen3 rollout as drift; the turn-by-turn reference does not.
    full = tok.decode(render_ids(tok, msgs, add_generation_prompt=True))
    assert "first reasoning" not in full
    assert check_drift(builder, msgs, ends_with_prompt=True) is None
    # The replies after each turn are exactly what the template renders for them.
    assert text.endswith("<|im_start|>user\nthird<|im_end|>\n<|im_start|>assistant\n")
    # Real drift is still caught under Qwen3: the second answer re-tokenised differently.
    start = builder.turn_starts[1]
    builder.token_ids[start] = tok.convert_tokens_to_ids("x")
    assert check_drift(builder, msgs, ends_with_prompt=True) is not None


def test_qwen3_random_conversations_have_no_false_drift():
    tok = family_tokenizer(QWEN3_TEMPLATE)
    rng = random.Random(3)
    for case in range(150):
        msgs = random_conversation(rng)
        for m in msgs:
            if m["role"] == "assistant" and rng.random() < 0.5:
                m["content"] = f"<think>\n{m['content'] or 'hmm'}\n</think>\n\nok"
        builder, _ = build_by_delta_path(tok, msgs, TOOLS if case % 2 else [], parser="hermes")
        assert check_drift(builder, msgs, msgs[-1]["role"] != "assistant") is None, case

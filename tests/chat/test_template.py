"""Chat templates and loss masks, exact with transformers' apply_chat_template (the real package as the peer).

A byte-level BPE tokenizer is trained in the test; random conversations (system prompts, multi-turn,
tool calls and tool outputs, reasoning, unicode, stray whitespace) come from a seeded generator.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import pickle
import random
import textwrap

import numpy as np
import pytest
import tokenizers as hf
from transformers import PreTrainedTokenizerFast

from tests._support.bpe import train_byte_level_bpe
from tokenport.chat import CHATML_TEMPLATE, ChatTemplate, encode_chat, encode_chats, load_chat_template
from tokenport.errors import ConfigError, InputDataError, TokenizerError
from tokenport.tokenizers import ByteTokenizer, load_tokenizer

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

# Llama-3's own template (no markers; `| trim` on every content), and the same with generation markers.
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
LLAMA3_MARKED = """{{- bos_token }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
    {%- if message['role'] == 'assistant' %}
        {%- generation -%}
        {%- if message['tool_calls'] is defined %}
            {%- for call in message['tool_calls'] %}{{ call['function'] | tojson(indent=2) }}{% endfor %}
        {%- endif %}
        {{- (message['content'] if message['content'] is defined else '') | trim + '<|eot_id|>' }}
        {%- endgeneration %}
    {%- else %}
        {{- message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"""

# Qwen-style: tools in the system turn, <tool_call> blocks, tool outputs in <tool_response>, reasoning kept
# only after the last user turn, a namespace, loopcontrols and an enable_thinking switch.
QWEN = """{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- "# Tools\\n\\n<tools>" }}
{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query=messages|length - 1) %}
{%- for message in messages[::-1] %}
{%- if message.role == 'user' %}{% set ns.last_query = messages|length - 1 - loop.index0 %}{% break %}{% endif %}
{%- endfor %}
{%- for message in messages %}
{%- if message.role == 'system' %}{% continue %}{% endif %}
{%- if message.role == 'user' %}
{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if message.reasoning_content is string and loop.index0 > ns.last_query %}
{{- '<think>\\n' + message.reasoning_content.strip('\\n') + '\\n</think>\\n\\n' }}
{%- endif %}
{%- if message.content is string %}{{- message.content }}{%- endif %}
{%- for call in message.tool_calls or [] %}
{{- '\\n<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' }}
{{- call.function.arguments | tojson + '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}"""

WORDS = ["the", "value", " of", "x", "é", "naïve", "你好", "世界", "🙂", "e\u0301", "Ω", "  ", "\n", "\t", "42", "-1.5"]
WORDS += ["def", "return", "(", ")", "{", "}", '"', "\\", "<", ">", "Ünïcödé", "ß", "…"]
TOOLS = [
    {"type": "function", "function": {"name": "lookup", "description": "Find.", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {}}}}},
]


# Characters the tokenizer never saw in training: split into several byte tokens that share one character's
# offsets, so a span starting or ending on one tests which of those tokens transformers' mask takes.
RARE = ["𝔘", "🐍", "ꙮ", "𓀀"]


def _text(rng: random.Random, low: int = 1, rare: bool = True) -> str:
    words = [rng.choice(WORDS) + rng.choice(["", " ", ""]) for _ in range(rng.randint(low, 12))]
    if rare and rng.random() < 0.5:
        words.insert(rng.choice([0, len(words)]), rng.choice(RARE))
    return "".join(words)


def conversation(rng: random.Random, tools: bool = True, reasoning: bool = True, rare: bool = True) -> list[dict]:
    """A random conversation: optional system prompt, 1-4 exchanges, tool calls and outputs, reasoning."""
    messages: list[dict] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": _text(rng, rare=rare)})
    for _ in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": _text(rng, rare=rare)})
        if tools and rng.random() < 0.3:
            calls = [
                {"function": {"name": rng.choice(["lookup", "add"]), "arguments": {"a": _text(rng, rare=rare)}}}
                for _ in range(rng.randint(1, 2))
            ]
            messages.append({"role": "assistant", "tool_calls": calls, "content": None})
            messages += [{"role": "tool", "content": _text(rng, rare=rare)} for _ in calls]
        answer = {"role": "assistant", "content": _text(rng, rare=rare)}
        if reasoning and rng.random() < 0.4:
            answer["reasoning_content"] = rng.choice(["\n", ""]) + _text(rng, rare=rare) + rng.choice(["\n", ""])
        messages.append(answer)
    return messages


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """(tokenport's hf tokenizer, the transformers tokenizer) over one trained BPE with chat special tokens."""
    rng = random.Random(0)
    texts = [inspect.getsource(textwrap), inspect.getsource(json.encoder)]
    texts += [_text(rng, rare=False) for _ in range(300)]
    path = train_byte_level_bpe(texts, 700, str(tmp_path_factory.mktemp("bpe") / "tokenizer.json"))
    raw = hf.Tokenizer.from_file(path)
    raw.add_special_tokens(SPECIALS)
    raw.save(path)
    peer = PreTrainedTokenizerFast(
        tokenizer_object=hf.Tokenizer.from_file(path), bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"
    )
    return load_tokenizer("hf:" + path), peer


def _peer(peer, template, messages, tools=None, **kwargs):
    out = peer.apply_chat_template(
        messages,
        tools=tools,
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
        **kwargs,
    )
    return out["input_ids"], out["assistant_masks"]


@pytest.mark.parametrize("engine", ["hf", "gigatoken"])
@pytest.mark.parametrize("source", [CHATML_TEMPLATE, LLAMA3_MARKED], ids=["chatml", "llama3-marked"])
def test_ids_and_masks_equal_transformers(bpe, source, engine):
    """gigatoken's offsets are derived from its ids, HF's are its own: both give transformers' masks."""
    tok, peer = bpe
    if engine == "gigatoken":
        pytest.importorskip("gigatoken")
        tok = load_tokenizer(f"gigatoken:{tok.path}")
    template = ChatTemplate(source, special_tokens=peer.special_tokens_map)
    rng = random.Random(1)
    for _ in range(80):
        messages = conversation(rng)
        tools = TOOLS if rng.random() < 0.5 else None
        ids, mask = encode_chat(tok, template, messages, tools=tools)
        want_ids, want_mask = _peer(peer, source, messages, tools)
        assert ids.dtype == np.int64 and mask.dtype == np.uint8
        assert ids.tolist() == want_ids
        assert mask.tolist() == want_mask
        assert 0 < mask.sum() < len(mask)


@pytest.mark.parametrize("source", [LLAMA3, QWEN, CHATML_TEMPLATE, LLAMA3_MARKED])
def test_text_equals_transformers(bpe, source):
    _, peer = bpe
    template = ChatTemplate(source, special_tokens=peer.special_tokens_map)
    rng = random.Random(2)
    for _ in range(60):
        messages = conversation(rng)
        tools = TOOLS if rng.random() < 0.5 else None
        prompt = rng.random() < 0.3
        kwargs = {"enable_thinking": rng.random() < 0.5} if prompt else {}
        text, _ = template.render(messages, tools=tools, add_generation_prompt=prompt, **kwargs)
        want = peer.apply_chat_template(
            messages, tools=tools, chat_template=source, tokenize=False, add_generation_prompt=prompt, **kwargs
        )
        assert text == want


def test_generation_spans_cover_assistant_text(bpe):
    _, peer = bpe
    template = ChatTemplate(CHATML_TEMPLATE)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo 🙂"}]
    text, spans = template.render(messages)
    assert [text[s:e] for s, e in spans] == ["yo 🙂<|im_end|>"]
    assert template.fingerprint == hashlib.sha256(CHATML_TEMPLATE.encode()).hexdigest()
    assert template.identity()["generation_markers"] is True


def test_span_search_without_markers_equals_markers_around_content(bpe):
    """A template without markers: the located assistant content gives the mask that a generation block
    around exactly that content gives in transformers (the `| trim` is found by the verified search).
    No rare characters: a block ending in a character split over tokens marks only its first token there."""
    tok, peer = bpe
    plain = ChatTemplate(LLAMA3, special_tokens=peer.special_tokens_map)
    marked_source = (
        "{{- bos_token }}{% for message in messages %}"
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
        "{%- if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim }}{% endgeneration %}"
        "{%- else %}{{ message['content'] | trim }}{% endif %}{{ '<|eot_id|>' }}{% endfor %}"
    )
    rng = random.Random(3)
    checked = 0
    for _ in range(80):
        messages = conversation(rng, tools=False, reasoning=False, rare=False)
        if any(m["role"] == "assistant" and not m["content"].strip() for m in messages):
            continue  # an empty span: transformers marks the token holding the character before it
        ids, mask = encode_chat(tok, plain, messages)
        want_ids, want_mask = _peer(peer, marked_source, messages)
        assert ids.tolist() == want_ids and mask.tolist() == want_mask
        checked += 1
    assert checked > 40


def test_last_assistant_keeps_only_the_final_turn(bpe):
    tok, peer = bpe
    template = ChatTemplate(CHATML_TEMPLATE)
    rng = random.Random(4)
    for _ in range(30):
        messages = conversation(rng)
        every = encode_chat(tok, template, messages)[1]
        last = encode_chat(tok, template, messages, policy="last_assistant")[1]
        runs = np.flatnonzero(np.diff(np.r_[0, every]) == 1)  # where each trained run begins
        assert not last[: runs[-1]].any()
        assert last[runs[-1] :].tolist() == every[runs[-1] :].tolist()


def test_reasoning_masked_or_trained(bpe):
    tok, _ = bpe
    messages = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "It is 4.", "reasoning_content": "two plus two makes four"},
    ]
    for source in (CHATML_TEMPLATE, QWEN):
        template = ChatTemplate(source)
        ids, trained = encode_chat(tok, template, messages)
        ids, masked = encode_chat(tok, template, messages, reasoning="mask")
        assert "two plus two makes four" in tok.decode(ids[trained == 1])
        kept = tok.decode(ids[masked == 1])
        assert "two" not in kept and "four" not in kept and "It is 4." in kept
        assert (masked <= trained).all()


def test_all_policy_trains_everything_but_tool_outputs(bpe):
    tok, _ = bpe
    messages = [
        {"role": "system", "content": "sys prompt"},
        {"role": "user", "content": "look up naïve"},
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": {}}}]},
        {"role": "tool", "content": "SECRET tool output"},
        {"role": "assistant", "content": "done"},
    ]
    for source in (CHATML_TEMPLATE, QWEN):
        ids, mask = encode_chat(tok, ChatTemplate(source), messages, policy="all", tools=TOOLS)
        trained = tok.decode(ids[mask == 1])
        assert "SECRET" not in trained and "output" not in trained
        assert "sys prompt" in trained and "look up naïve" in trained and "done" in trained
        assert tok.decode(ids[mask == 0]).strip() == "SECRET tool output"


def test_byte_tokenizer_with_builtin_chatml():
    tok = ByteTokenizer()
    messages = [{"role": "user", "content": "héllo 你好"}, {"role": "assistant", "content": "ça va 🙂"}]
    text, spans = ChatTemplate.chatml().render(messages)
    ids, mask = encode_chat(tok, ChatTemplate.chatml(), messages)
    assert ids.tolist() == tok.encode(text).tolist()
    assert tok.decode(ids[mask == 1]) == "ça va 🙂<|im_end|>"
    _, offsets = tok.encode_offsets("é🙂a")
    assert offsets.tolist() == [[0, 1], [0, 1], [1, 2], [1, 2], [1, 2], [1, 2], [2, 3]]


def test_tokenizer_dir_loading_matches_transformers(bpe, tmp_path):
    _, peer = bpe
    peer.chat_template = LLAMA3_MARKED
    peer.save_pretrained(tmp_path / "jinja")  # transformers writes chat_template.jinja
    template = ChatTemplate.from_tokenizer_dir(str(tmp_path / "jinja"))
    assert template.source == LLAMA3_MARKED
    assert template.special_tokens == peer.special_tokens_map
    peer.chat_template = {"default": CHATML_TEMPLATE, "tool_use": QWEN}
    peer.save_pretrained(tmp_path / "named")  # chat_template.jinja + additional_chat_templates/tool_use.jinja
    assert ChatTemplate.from_tokenizer_dir(str(tmp_path / "named")).source == CHATML_TEMPLATE
    assert ChatTemplate.from_tokenizer_dir(str(tmp_path / "named"), name="tool_use").source == QWEN
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "tokenizer_config.json").write_text(json.dumps({"chat_template": "C"}))
    assert ChatTemplate.from_tokenizer_dir(str(tmp_path / "plain")).source == "C"
    (tmp_path / "cfg").mkdir()
    config = {"chat_template": [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"}]}
    config["bos_token"] = {"content": "<s>", "lstrip": False}
    (tmp_path / "cfg" / "tokenizer_config.json").write_text(json.dumps(config))
    assert ChatTemplate.from_tokenizer_dir(str(tmp_path / "cfg")).source == "A"
    named = ChatTemplate.from_tokenizer_dir(str(tmp_path / "cfg"), name="tool_use")
    assert named.source == "B" and named.special_tokens == {"bos_token": "<s>"}
    with pytest.raises(ConfigError, match="no chat template named 'other'"):
        ChatTemplate.from_tokenizer_dir(str(tmp_path / "cfg"), name="other")
    with pytest.raises(ConfigError, match="has no chat template"):
        ChatTemplate.from_tokenizer_dir(str(tmp_path))
    path = tmp_path / "t.jinja"
    path.write_text(QWEN)
    loaded = pickle.loads(pickle.dumps(ChatTemplate.from_file(str(path))))
    assert loaded.source == QWEN and loaded.render([{"role": "user", "content": "x"}])[0].endswith("x<|im_end|>\n")


def test_bad_messages_are_refused_naming_the_field(bpe):
    tok, _ = bpe
    template = ChatTemplate.chatml()
    user = {"role": "user", "content": "hi"}
    with pytest.raises(InputDataError, match=r"messages\[1\]\.role='robot'"):
        encode_chat(tok, template, [user, {"role": "robot", "content": "x"}])
    with pytest.raises(InputDataError, match=r"messages\[1\]\.content is list"):
        encode_chat(tok, template, [user, {"role": "assistant", "content": ["x"]}])
    with pytest.raises(InputDataError, match=r"messages\[0\]\.content is NoneType"):
        encode_chat(tok, template, [{"role": "user", "content": None}])
    with pytest.raises(InputDataError, match=r"messages\[1\]\.reasoning_content is int"):
        encode_chat(tok, template, [user, {"role": "assistant", "content": "a", "reasoning_content": 3}])
    with pytest.raises(InputDataError, match=r"messages\[0\]\.extra is a set"):
        encode_chat(tok, template, [{**user, "extra": {1}}])
    with pytest.raises(InputDataError, match="private-use characters"):
        encode_chat(tok, ChatTemplate(QWEN), [user, {"role": "assistant", "content": "a\U00100001"}])
    with pytest.raises(InputDataError, match="non-empty list"):
        encode_chat(tok, template, [])
    with pytest.raises(InputDataError, match=r"tools\[0\] is str"):
        encode_chat(tok, template, [user], tools=["lookup"])
    with pytest.raises(ConfigError, match="policy='some'"):
        encode_chat(tok, template, [user], policy="some")


def test_template_refusals(bpe):
    tok, _ = bpe
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]
    upper = ChatTemplate("{% for m in messages %}{{ m['role'] }}: {{ m['content'] | upper }}\n{% endfor %}")
    with pytest.raises(ConfigError, match="changes the text of messages\\[1\\].content"):
        encode_chat(tok, upper, messages)
    twice = ChatTemplate("{% for m in messages %}{{ m['content'] }}|{{ m['content'] }}\n{% endfor %}")
    with pytest.raises(ConfigError, match="printed 2 times"):
        encode_chat(tok, twice, messages)
    glued = ChatTemplate(
        "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ m['reasoning_content'] }}"
        "{{ m['content'].strip('\\n') }}{% else %}{{ m['content'] }}|{% endif %}{% endfor %}"
    )
    ambiguous = [messages[0], {"role": "assistant", "content": "\ny", "reasoning_content": "x\n"}]
    assert glued.render(ambiguous)[0] == "hi|x\ny"  # reasoning "x\n" + content "y", or "x" + "\ny"
    with pytest.raises(ConfigError, match="in more than one way"):
        encode_chat(tok, glued, ambiguous)
    calls = [{"type": "function", "function": {"name": "lookup", "arguments": {}}}]
    with pytest.raises(ConfigError, match="tool_calls.*needs a template with markers"):
        llama3 = ChatTemplate(LLAMA3, special_tokens={"bos_token": "<|begin_of_text|>"})
        encode_chat(tok, llama3, [messages[0], {"role": "assistant", "tool_calls": calls}])
    one_block = ChatTemplate(
        "{% for m in messages %}{% if loop.last %}{% generation %}{{ m['content'] }}{% endgeneration %}"
        "{% else %}{{ m['content'] }}{% endif %}{% endfor %}"
    )
    with pytest.raises(ConfigError, match="1 generation blocks for 2 assistant"):
        encode_chat(tok, one_block, messages * 2, policy="last_assistant")
    strict = ChatTemplate("{% if messages[0]['role'] != 'system' %}{{ raise_exception('need a system') }}{% endif %}")
    with pytest.raises(InputDataError, match="need a system"):
        strict.render(messages)
    with pytest.raises(InputDataError, match="SecurityError"):
        ChatTemplate("{% set ns = namespace(_x=1) %}").render(messages)
    with pytest.raises(InputDataError, match="cannot render"):
        ChatTemplate("{{ ''.__class__.__mro__ }}").render(messages)
    with pytest.raises(ConfigError, match="not valid Jinja"):
        ChatTemplate("{% for %}")
    with pytest.raises(TokenizerError, match="no character offsets"):
        encode_chat(_NoOffsets(), ChatTemplate.chatml(), messages)


class _NoOffsets(ByteTokenizer):
    """A tokenizer backend without character offsets (the base class's refusal)."""

    encode_offsets = ByteTokenizer.__mro__[1].encode_offsets  # the Tokenizer base implementations
    encode_offsets_batch = ByteTokenizer.__mro__[1].encode_offsets_batch


def test_masked_reasoning_is_found_where_the_template_strips_it(bpe):
    """Qwen-style templates print reasoning stripped of newlines, and only after the last user turn."""
    tok, _ = bpe
    template = ChatTemplate(QWEN)
    rng = random.Random(5)
    for _ in range(40):
        messages = conversation(rng)
        text, _ = template.render(messages, tools=TOOLS)
        ids, mask = encode_chat(tok, template, messages, policy="all", reasoning="mask", tools=TOOLS)
        hidden = tok.decode(ids[mask == 0])
        for m in messages:
            reasoning = m.get("reasoning_content", "").strip("\n")
            if reasoning and f"<think>\n{reasoning}\n</think>" in text:
                assert reasoning in hidden


def test_a_block_ending_in_the_first_token_marks_to_the_end_as_transformers(bpe):
    """transformers tests `if end_token`, so a span whose last character is in token 0 marks to the end."""
    tok, peer = bpe
    source = (
        "{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}"
        "{% endgeneration %}{% else %}{{ m['content'] }}{% endif %}{{ '\\n' }}{% endfor %}"
    )
    messages = [{"role": "assistant", "content": "x"}, {"role": "user", "content": "the value"}]
    ids, mask = encode_chat(tok, ChatTemplate(source), messages)
    assert ChatTemplate(source).render(messages)[1] == [(0, 1)] and mask.all()
    assert (ids.tolist(), mask.tolist()) == _peer(peer, source, messages)


def test_load_chat_template_resolves_the_default(bpe, tmp_path):
    tok, peer = bpe
    assert load_chat_template().source == CHATML_TEMPLATE
    assert load_chat_template(None, ByteTokenizer()).source == CHATML_TEMPLATE
    with pytest.raises(ConfigError, match="has no chat template"):
        load_chat_template(None, tok)  # the trained tokenizer's directory holds no template
    peer.chat_template = QWEN
    peer.save_pretrained(tmp_path)
    assert load_chat_template(None, load_tokenizer(f"hf:{tmp_path}")).source == QWEN
    assert load_chat_template(str(tmp_path)).source == QWEN
    assert load_chat_template(str(tmp_path / "chat_template.jinja")).source == QWEN
    assert load_chat_template("chatml", tok).source == CHATML_TEMPLATE
    with pytest.raises(ConfigError, match="neither 'chatml'"):
        load_chat_template(str(tmp_path / "missing.jinja"))


def test_span_search_prints_each_field_its_own_way(bpe):
    """Qwen-style without markers: content printed as is, reasoning stripped of newlines (and dropped
    before the last user turn), each located by the verified search; both land in the trained tokens."""
    tok, _ = bpe
    template = ChatTemplate(QWEN)
    rng = random.Random(6)
    for _ in range(40):
        messages = conversation(rng, tools=False)
        text, _ = template.render(messages)
        ids, trained = encode_chat(tok, template, messages)
        ids, masked = encode_chat(tok, template, messages, reasoning="mask")
        kept = tok.decode(ids[trained == 1])
        for m in messages:
            if m["role"] == "assistant":
                assert m["content"] in kept
                reasoning = m.get("reasoning_content", "").strip("\n")
                if reasoning and f"<think>\n{reasoning}\n</think>" in text:
                    assert reasoning in kept
        assert (masked <= trained).all()


def test_a_template_renders_one_conversation_at_a_time():
    """The generation tracker is the template's: a second render while one runs is refused, not mixed in."""
    template = ChatTemplate.chatml()
    messages = [{"role": "user", "content": "hi"}]
    with template._compiled.environment.track_generation([], []):  # a render under way (as from another thread)
        with pytest.raises(ConfigError, match="one conversation at a time"):
            template.render(messages)
    assert template.render(messages)[0] == "<|im_start|>user\nhi<|im_end|>\n"


def test_gigatoken_without_derivable_offsets_is_refused_with_the_hf_spec_to_use(bpe, tmp_path):
    pytest.importorskip("gigatoken")
    tok, _ = bpe
    config = json.loads(open(tok.path).read())
    config["added_tokens"][-1]["lstrip"] = True  # an added token that swallows the spaces before it
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config))
    giga = load_tokenizer(f"gigatoken:{path}")
    with pytest.raises(TokenizerError, match=f"lstrip.*use 'hf:{path}'"):
        encode_chat(giga, ChatTemplate.chatml(), [{"role": "user", "content": "hi"}])


def test_builtin_chatml_prints_tool_calls_as_qwen_does():
    """Arguments given as a JSON string are printed as they are, a dict as JSON; a newline separates calls."""
    calls = [
        {"type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
        {"type": "function", "function": {"name": "g", "arguments": {"b": "é"}}},
    ]
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": calls}]
    text, spans = ChatTemplate.chatml().render(messages)
    assert text[spans[0][0] : spans[0][1]] == (
        '<tool_call>\n{"name": "f", "arguments": {"a":1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {"b": "é"}}\n</tool_call><|im_end|>'
    )


@pytest.mark.parametrize("engine", ["hf", "gigatoken"])
def test_encode_chats_equals_one_conversation_at_a_time(bpe, engine):
    """The batch (one tokenizer call, one marking pass) gives each conversation's own ids and mask."""
    tok, peer = bpe
    if engine == "gigatoken":
        pytest.importorskip("gigatoken")
        tok = load_tokenizer(f"gigatoken:{tok.path}")
    rng = random.Random(5)
    cases = [
        (CHATML_TEMPLATE, "assistant", "train", True),
        (LLAMA3_MARKED, "last_assistant", "mask", True),
        (LLAMA3, "assistant", "train", False),
        (QWEN, "all", "mask", True),
        (QWEN, "last_assistant", "train", False),
    ]
    for source, policy, reasoning, calls in cases:
        template = ChatTemplate(source, special_tokens=peer.special_tokens_map)
        chats = [conversation(rng, tools=calls) for _ in range(25)]
        tools = [TOOLS if rng.random() < 0.5 else None for _ in chats]
        batch = encode_chats(tok, template, chats, policy=policy, reasoning=reasoning, tools=tools)
        assert len(batch) == len(chats) and batch.ids.dtype == np.int64 and batch.masks.dtype == np.uint8
        for k, (chat, schemas) in enumerate(zip(chats, tools)):
            ids, mask = encode_chat(tok, template, chat, policy=policy, reasoning=reasoning, tools=schemas)
            got_ids, got_mask = batch[k]
            assert got_ids.tolist() == ids.tolist() and got_mask.tolist() == mask.tolist(), (source[:20], policy, k)
        assert batch[-1][0].tolist() == batch.ids[len(batch.ids) - int(batch.lengths[-1]) :].tolist()
    assert len(encode_chats(tok, ChatTemplate.chatml(), [])) == 0
    with pytest.raises(ConfigError, match="tools has 1 entries for 2 conversations"):
        encode_chats(tok, ChatTemplate.chatml(), [chats[0], chats[1]], tools=[None])

"""Conversations -> token ids + loss masks: record formats, chat templates, masking policies.

``formats``: conversation records (OpenAI messages, ShareGPT, prompt-completion, Alpaca) to checked
messages (and, for prompt-completion, where the completion starts: only it is trained, as in TRL).
``template``: a model's chat template (from a tokenizer directory, a file, or the built-in ChatML),
rendered with jinja2 exactly as transformers' ``apply_chat_template`` renders it, with the character
spans of its ``{% generation %}`` blocks. ``masks``: ``encode_chat``, one conversation to ids and a
uint8 loss mask by a masking policy (every assistant turn, the last one, or everything but tool
outputs; reasoning trained or masked), equal to transformers' assistant mask where the template marks
generation, or TRL's completion mask for a prompt-completion pair; ``encode_chats``, many
conversations in one tokenizer call and one masking pass.
"""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .formats import detect_format, to_conversation, to_messages
    from .masks import ChatTokens, encode_chat, encode_chats
    from .template import CHATML_TEMPLATE, ChatTemplate, load_chat_template

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "CHATML_TEMPLATE": ".template",
    "ChatTemplate": ".template",
    "ChatTokens": ".masks",
    "detect_format": ".formats",
    "encode_chat": ".masks",
    "encode_chats": ".masks",
    "load_chat_template": ".template",
    "to_conversation": ".formats",
    "to_messages": ".formats",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)

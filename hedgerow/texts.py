"""What counts as text to embed: a string with at least one visible character.

A string of only whitespace, control or zero-width/format characters tokenizes to nothing but
the model's special tokens ([CLS] [SEP]), so every such string would get the same meaningless
vector; the CLI and the gateway refuse it like an empty string. One module so both agree.
"""

import re

# Whitespace, C0/C1 controls, soft hyphen, zero-width and bidi marks, word joiner and friends,
# the byte-order mark: what tokenizers' normalizers drop or treat as space.
_INVISIBLE = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u00ad\u180e\u200b-\u200f\u2028-\u202e"
                        r"\u2060-\u206f\ufeff]*")


def is_blank(text: str) -> bool:
    """True when `text` has no visible character (the match stops at the first one)."""
    return _INVISIBLE.fullmatch(text) is not None

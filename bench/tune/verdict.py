"""The words tune's recommendation ends in (tune.json "verdict"), and what each one advises.

One place for the rule every reader needs: only "faster" tells the user to pass flags; "noisy",
"small" (above noise, below --min-gain) and "stand-in" (measured with another kernel than vLLM's
own) keep vLLM's default just as "default is fastest" does; "default not measured" and
"no valid config" give no margin at all (README, "How tune recommends"). The enum is str-valued,
so tune.json holds the same words it always did and `Verdict.FASTER == "faster"`.
"""

from __future__ import annotations

from attnsel.words import Word


class Verdict(Word):
    FASTER = "faster"
    NOISY = "noisy"
    SMALL = "small"
    STAND_IN = "stand-in"
    DEFAULT_IS_FASTEST = "default is fastest"
    DEFAULT_NOT_MEASURED = "default not measured"
    NO_VALID_CONFIG = "no valid config"

    @property
    def advises_flags(self) -> bool:
        """The fastest pair beat vLLM's default above noise, by --min-gain, with vLLM's own kernel."""
        return self is Verdict.FASTER

    @property
    def keeps_default(self) -> bool:
        """Tune measured vLLM's default and advises keeping it: nothing worth changing flags for."""
        return self in _KEEPS_DEFAULT

    @property
    def confidence(self) -> str:
        """The word a report's "confidence" column shows for this verdict."""
        return _CONFIDENCE.get(self, self.value)


_KEEPS_DEFAULT = frozenset({Verdict.NOISY, Verdict.SMALL, Verdict.STAND_IN, Verdict.DEFAULT_IS_FASTEST})
_CONFIDENCE = {
    Verdict.FASTER: "above noise", Verdict.NOISY: "within noise", Verdict.DEFAULT_NOT_MEASURED: "no baseline",
    Verdict.NO_VALID_CONFIG: "nothing measured",
}


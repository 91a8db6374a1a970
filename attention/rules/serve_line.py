"""A pasted `vllm serve MODEL [flags...]` line (after `--` on explain's and preflight's command line),
read into the flags attnsel models. Names and aliases as vLLM 0.34.0 declares them in
vllm/engine/arg_utils.py `EngineArgs.add_cli_args` (--tensor-parallel-size/-tp :1224, -pp :1187,
--quantization/-q :999, -dcp/-pcp :1227/:1251, --attention-config/-ac :1925, ...) and
vllm/entrypoints/cli/serve.py (the positional model tag wins over --model, :56). Inside the line,
`-q` is vLLM's --quantization. A flag the table does not hold is never refused: it is listed as
"not checked" (vLLM itself refuses the flags it does not know)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from attnsel.errors import UserInputError

_VALUE_WORD = re.compile(r"[0-9][0-9.]*[kKmMgGtT]?|true|false|True|False|auto")

# vLLM's flag names (and aliases) -> attnsel's option of the same meaning; None: a flag with no value
_VALUE_FLAGS = {
    "--model": "--model",
    "--tensor-parallel-size": "--tensor-parallel-size", "-tp": "--tensor-parallel-size",
    "--pipeline-parallel-size": "--pipeline-parallel-size", "-pp": "--pipeline-parallel-size",
    "--decode-context-parallel-size": "--decode-context-parallel-size", "-dcp": "--decode-context-parallel-size",
    "--prefill-context-parallel-size": "--prefill-context-parallel-size", "-pcp": "--prefill-context-parallel-size",
    "--dtype": "--dtype",
    "--kv-cache-dtype": "--kv-cache-dtype",
    "--block-size": "--block-size",
    "--attention-backend": "--attention-backend",
    "--attention-config": "--attention-config", "-ac": "--attention-config",
    "--max-model-len": "--max-model-len",
    "--max-num-seqs": "--max-num-seqs",
    "--max-num-batched-tokens": "--max-num-batched-tokens",
    "--gpu-memory-utilization": "--gpu-memory-utilization",
    "--quantization": "--quantization", "-q": "--quantization",
    "--mamba-cache-mode": "--mamba-cache-mode",
    "--mamba-ssm-cache-dtype": "--mamba-ssm-cache-dtype",
    "--mamba-cache-dtype": "--mamba-cache-dtype",
    "--mm-encoder-attn-backend": "--mm-encoder-attn-backend",
}
# vLLM's BooleanOptionalAction flags attnsel models: --X and --no-X
_BOOL_FLAGS = {"--enforce-eager": "--enforce-eager", "--enable-prefix-caching": "--enable-prefix-caching",
               "--allow-deprecated-quantization": "--allow-deprecated-quantization"}


@dataclass(frozen=True)
class ServeLine:
    """What a pasted serve line says: (attnsel option, value or None for a switch) in order, and the
    flags no option of the command reads."""

    options: tuple[tuple[str, str | None], ...] = ()
    not_checked: tuple[str, ...] = field(default=())
    flags: tuple[str, ...] = ()  # every flag of the line as vLLM's parser names it (`vllm_flag_name`)

    @property
    def note(self) -> str | None:
        if not self.not_checked:
            return None
        return f"not checked: {', '.join(self.not_checked)} from the pasted serve line (attnsel does not model them)"


def _vllm_spelling(flag: str) -> str:
    """vLLM's FlexibleArgumentParser takes --max_model_len for --max-model-len (argparse_utils.py:386)."""
    return "--" + flag[2:].replace("_", "-") if flag.startswith("--") else flag


def vllm_flag_name(arg: str) -> str:
    """The option a flag of the line names, as vLLM's FlexibleArgumentParser.parse_args rewrites it before
    argparse sees it (utils/argparse_utils.py:379-408 @ 0.34.0): the name before `=`, underscores as dashes up
    to the first `.` of a JSON argument (`--compilation_config.mode`), `-O3` / `-O=3` as --optimization-level."""
    if arg.startswith("--"):
        name = arg.split("=", 1)[0]
        head, dot, rest = name.partition(".")
        return head.replace("_", "-") + dot + rest
    if arg.startswith("-O") and arg != "-O":
        return "--optimization-level"
    return arg.split("=", 1)[0]


def unrecognized_flags(flags: tuple[str, ...], declared: frozenset[str]) -> tuple[str, ...]:
    """The flags a release's `vllm serve` would refuse ("unrecognized arguments"): not one of its declared
    option strings nor a form its parser derives from one -- `--no-X` of a boolean `--X` (argparse's
    BooleanOptionalAction), `--disable-X` for `--enable-X` and back (EnableDisableAction,
    utils/argparse_utils.py:120-145), `--X.key` of a JSON argument, `-h`/`--help` -- nor a prefix of
    exactly one of them (argparse's abbreviations). An empty `declared` (a release without the data) refuses
    nothing."""
    if not declared:
        return ()
    accepted = _accepted_forms(declared)
    refused = []
    for flag in flags:
        name = flag.split(".", 1)[0].rstrip("+") if flag.startswith("--") else flag
        if name in accepted or name == "-O":
            continue
        if name.startswith("--") and any(option.startswith(name) for option in accepted):
            continue  # an abbreviation (an ambiguous one is argparse's own error, not modelled here)
        refused.append(flag)
    return tuple(dict.fromkeys(refused))


def check_serve_line_flags(line: ServeLine, declared: frozenset[str], release: str) -> None:
    """Bad input when the release's `vllm serve` would refuse the line's flags: argparse's own error there
    (`vllm serve: error: unrecognized arguments: ...`, exit 2 from vllm serve itself)."""
    refused = unrecognized_flags(line.flags, declared)
    if refused:
        raise UserInputError(f"vLLM {release}'s `vllm serve` would refuse the pasted line: unrecognized arguments: "
                             f"{' '.join(refused)} (`vllm serve --help` there lists its flags)")


@functools.lru_cache(maxsize=8)  # per release's flag set: expand_abbreviation asks for it once per flag
def _accepted_forms(declared: frozenset[str]) -> frozenset[str]:
    forms = set(declared) | {"-h", "--help"}
    for option in declared:
        if not option.startswith("--"):
            continue
        forms.add("--no-" + option[2:])
        for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
            if option.startswith(prefix):
                forms.add(inverse + option.removeprefix(prefix))
    return frozenset(forms)


def expand_abbreviation(name: str, declared: frozenset[str]) -> str:
    """argparse's unique prefixes (`--tensor-parallel` for --tensor-parallel-size), as the release's parser
    reads them; the name itself where it is an option, matches none or more than one."""
    if not declared or not name.startswith("--"):
        return name
    accepted = _accepted_forms(declared)
    if name in accepted:
        return name
    matches = [option for option in accepted if option.startswith(name)]
    return matches[0] if len(matches) == 1 else name


def serve_arguments(tokens: list[str]) -> list[str]:
    """The line's arguments after `vllm serve` (pasted with it, with `serve` alone, or without either)."""
    args = list(tokens)
    if args[:2] == ["vllm", "serve"]:
        return args[2:]
    if args[:1] in (["serve"], ["vllm"]):
        return args[1:]
    return args


def read_serve_line(tokens: list[str], takes: frozenset[str], declared: frozenset[str] = frozenset()) -> ServeLine:
    """`tokens`: what follows `--` (`vllm serve` itself optional). `takes`: the options the command has;
    a known vLLM flag the command has no option for is not checked, as is every unknown one. `declared`:
    the release's option strings, for argparse's abbreviations (none: names as written)."""
    args = serve_arguments(tokens)
    options: list[tuple[str, str | None]] = []
    not_checked: list[str] = []
    flags = [vllm_flag_name(arg) for arg in args if arg.startswith("-") and arg != "-"]
    model_tag = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            if model_tag is not None:
                raise UserInputError(f"the pasted serve line names two models ({model_tag!r} and {arg!r}): vLLM takes one")
            model_tag = arg
            continue
        name, equals, value = arg.partition("=")
        head, dot, key = _vllm_spelling(name).partition(".")
        name = expand_abbreviation(head, declared) + dot + key
        ours = _VALUE_FLAGS.get(name) or _VALUE_FLAGS.get(name.split(".")[0])
        if ours is not None and (name in _VALUE_FLAGS or (ours == "--attention-config" and "." in name)):
            if not equals:
                if i >= len(args):
                    raise UserInputError(f"{name} in the pasted serve line needs a value")
                value, i = args[i], i + 1
            option = ours if "." not in name else "--attention-config" + name[name.index("."):]
            _keep(options, not_checked, takes, ours, option, value, arg)
            continue
        switch = _BOOL_FLAGS.get(name) or _BOOL_FLAGS.get(name.replace("--no-", "--", 1))
        if switch is not None and not equals:
            negated = name.startswith("--no-")
            _keep(options, not_checked, takes, switch, ("--no-" + switch[2:]) if negated else switch, None, arg)
            continue
        # a flag attnsel does not model: its value (the next word that is no flag) goes with it -- before the
        # model only a word that is no model name (a number, true/false), as vllm serve's usage puts MODEL first
        if not equals and i < len(args) and not args[i].startswith("-") and (model_tag is not None
                                                                           or _VALUE_WORD.fullmatch(args[i])):
            arg, i = f"{arg} {args[i]}", i + 1
        not_checked.append(arg)
    if model_tag is not None:
        options = [(o, v) for o, v in options if o != "--model"] + [("--model", model_tag)]  # serve.py:56
    return ServeLine(tuple(options), tuple(not_checked), tuple(flags))


def _keep(options: list, not_checked: list, takes: frozenset[str], ours: str, option: str, value: str | None, arg: str) -> None:
    if ours in takes:
        options.append((option, value))
    else:
        not_checked.append(arg if value is None or "=" in arg else f"{arg} {value}")


def merge_serve_line(own: list[str], line: ServeLine, canonical: dict[str, str]) -> list[str]:
    """The command's own options, then the serve line's. `canonical`: each of the command's option
    names (aliases too) -> its main name. An option given on both sides with different values is bad
    input: which one was meant would be a guess (the same value twice is fine)."""
    given = _given(own, canonical)
    if "--model" not in given and not any(option == "--model" for option, _ in line.options):
        raise UserInputError("the pasted serve line names no model: paste it as `-- vllm serve MODEL [flags...]`")
    merged = list(own)
    for option, value in line.options:
        if option.startswith("--no-") and option not in canonical:
            continue  # vLLM's --no-X of a switch the command has no --no-X for: the default, nothing to pass
        main = canonical.get(option, option)
        if main in given and given[main] != value:
            shown = "given" if given[main] is None else repr(given[main])
            raise UserInputError(f"{main} {shown} and the pasted serve line's {option} {value!r} contradict each "
                                 "other: give it once")
        if main not in given:
            merged += [option] if value is None else [option, value]
    return merged


def _given(own: list[str], canonical: dict[str, str]) -> dict[str, str | None]:
    """The values the command's own args give, by main option name."""
    given: dict[str, str | None] = {}
    for i, arg in enumerate(own):
        name, equals, value = arg.partition("=")
        if name not in canonical:
            continue
        following = own[i + 1] if i + 1 < len(own) else None
        given[canonical[name]] = value if equals else following if following and not following.startswith("-") else None
    return given

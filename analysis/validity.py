"""Answer validity (docs/architecture.md): can this answer text be used for brand analysis?

Validity is separate from collection state: a "completed" upstream task can still return an
error page or a login wall. :func:`classify_answer` returns ``Validity(valid, reason)`` with
one of these stable reason codes, checked IN THIS ORDER (first hit wins):

1. ``"empty"``      nothing visible: blank, whitespace/zero-width only, or markup without
                    visible text (but an HTML document whose only content is a password
                    field or captcha widget is a login page, not empty).
2. ``"error_page"`` an error page instead of an answer:
                    (a) an HTML document whose <title> is an error title
                        ("502 Bad Gateway", "Internal Server Error", "服务器错误", ...);
                    (b) a JSON object with a non-empty top-level "error"/"errors" value
                        and no answer-like key ("answer", "content", "text", ...);
                    (c) visible text DOMINATED by error vocabulary (see "Dominance").
3. ``"login_page"`` a login, sign-in, captcha or bot-check wall:
                    (a) an HTML document with a password field, a captcha/bot-challenge
                        widget (recaptcha, hcaptcha, turnstile, geetest, "captcha" in
                        id/class/name/src), or a login/challenge <title>;
                    (b) visible text DOMINATED by wall vocabulary ("请登录", "验证码",
                        "verify you are human", "Sign in to continue", ...).
4. ``"truncated"``  ``collection_state == "truncated"`` (the connector says the answer was
                    cut off). Other collection states do not affect validity.
5. ``"refusal"``    visible text DOMINATED by a refusal ("I'm sorry, but I can't help with
                    that.", "抱歉我无法回答这个问题。", ...). A refusal sentence followed by
                    a real answer stays valid.
6. ``"too_short"``  fewer than ``min_chars`` non-whitespace visible characters.

Refusal is checked before too_short because short refusals are common and the more specific
reason is the useful one; content checks come before ``truncated`` because a truncated login
page is still a login page.

Dominance
    A single keyword never decides. For a category we require (1) at least one trigger
    phrase, and (2) that after deleting every match of every trigger and boilerplate
    phrase of that category (plus generic filler such as "nginx", "Ray ID: ...",
    "请稍后再试"; all patterns run on the same text, overlapping matches merge), at most
    ``DOMINANCE_RATIO`` of the text's letters/digits/CJK characters remain (or at most
    ``DOMINANCE_SLACK`` characters, for very short texts). An ordinary answer that says
    "log in to the dashboard and ..." or "a 502 Bad Gateway error means ..." keeps most of
    its content after deletion, so it stays valid.

HTML
    The text is treated as an HTML document when ``raw_mime`` mentions html or the text
    starts with a doctype/<html>/<head>/<body> or contains <title>, <body or <form. Only then
    are the structural checks run, and the dominance checks use the visible text (script,
    style and template contents removed). Markdown answers with an occasional inline tag
    are not documents.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from html.parser import HTMLParser

from analysis.chartables import CharTable
from connectors import safejson

__all__ = [
    "DOMINANCE_RATIO",
    "DOMINANCE_SLACK",
    "REASONS",
    "Validity",
    "classify_answer",
]

REASONS = ("empty", "error_page", "login_page", "truncated", "refusal", "too_short")
DOMINANCE_RATIO = 0.3
DOMINANCE_SLACK = 6


@dataclass(frozen=True)
class Validity:
    valid: bool
    reason: str | None = None


VALID = Validity(True, None)

_F = re.IGNORECASE

# ------------------------------------------------------------------------------ patterns
# Everything is matched against NFKC-casefolded text, so full-width forms are covered
# (full-width ! ? , : fold to ASCII; only the ideographic full stop needs listing).

# The rest of a refusal sentence: bounded, and never across "but"/"however"/"不过"/"但", so
# "I can't browse the web, but Acme is ..." keeps its content.
_SENT_END = r"(?:(?!\bbut\b|\bhowever\b|不过|但)[^.!?。\n]){0,80}[.!?。]?"
_CJK_SENT_END = r"(?:(?!不过|但|\bbut\b)[^。!?\n]){0,40}[。!?]?"

_ERROR_TRIGGERS = [
    r"\b(?:http/\d(?:\.\d)?\s*)?[45]\d\d\s*[-:]?\s*(?:bad gateway|bad request|forbidden|not found"
    r"|gateway time-?out|service (?:temporarily )?unavailable|internal server error"
    r"|too many requests|method not allowed|request timeout|unauthorized)\b",
    r"\binternal server error\b",
    r"\bbad gateway\b",
    r"\bgateway time-?out\b",
    r"\bservice (?:temporarily )?unavailable\b",
    r"\bsomething went wrong\b",
    r"\ban (?:unexpected |internal )?error (?:has )?occurred\b",
    r"\b(?:rate limit exceeded|too many requests)\b",
    r"\bnetwork error\b",
    r"\bpage not found\b",
    r"\baccess denied\b",
    r"\berror code:?\s*\d+",
    r"服务器(?:内部)?(?:错误|异常|繁忙)",
    r"系统(?:繁忙|错误|异常|维护中?)",
    r"服务(?:暂时)?不可用",
    r"网关(?:错误|超时)",
    r"网络(?:错误|异常)",
    r"请求(?:过于频繁|失败|超时)",
    r"页面(?:不存在|找不到|出错了?)",
    r"(?:出错了|发生(?:了)?错误|未知错误)",
    r"^\W*(?:error|错误)\W*$",
]
_ERROR_BOILERPLATE = [
    r"\b(?:nginx|apache|openresty|tengine|cloudflare|iis|varnish|envoy)(?:/[\d.]+)?\b",
    r"\b(?:please )?try again(?: later| in a (?:few )?(?:moment|minute)s?)?\b",
    r"\b(?:please )?(?:refresh|reload) (?:the|this) page\b",
    r"\b(?:ray id|request id|reference(?: #| id)?|trace id|error id)\s*[:#]?\s*[\w.-]+",
    r"\b(?:we(?:'re| are) (?:sorry|working on it)|sorry)\b",
    r"\b(?:contact (?:the )?(?:support|administrator|site owner))\b",
    r"\b(?:error|oops|status|code|the server|server|upstream|http)\b",
    r"\b[45]\d\d\b",
    r"请稍后(?:再试|重试)",
    r"请(?:刷新|重新加载)(?:页面)?(?:后重试)?",
    r"(?:抱歉|对不起|很抱歉|哎呀)",
    r"(?:错误|错误码|错误代码)[:]?\s*\w*",
    r"(?:联系管理员|返回首页)",
]

_LOGIN_TRIGGERS = [
    r"\b(?:please )?(?:log ?in|sign ?in)(?: (?:to|or sign up to) (?:continue|proceed|view"
    r"|access|see)\b[^.!?\n]*)?",
    r"\b(?:you (?:must|need to) (?:be logged in|log ?in|sign ?in))\b",
    r"\bverify (?:that )?you are (?:a )?human\b",
    r"\bare you a robot\b",
    r"\b(?:complete|solve) the (?:captcha|security check|challenge)\b",
    r"\bcaptcha\b",
    r"\bchecking (?:if the site connection is secure|your browser)\b",
    r"\bjust a moment\b",
    r"\battention required\b",
    r"\benable javascript and cookies to continue\b",
    r"请(?:先)?登录",
    r"(?:登录|登入)后(?:查看|继续|使用|访问)",
    r"(?:扫码|手机号|账号|密码|短信)登录",
    r"(?:登录|注册)",
    r"(?:获取|输入|短信|图形)?验证码",
    r"人机验证",
    r"安全验证",
    r"请(?:完成|进行)(?:安全)?验证",
    r"(?:拖动|滑动)滑块",
]
_LOGIN_BOILERPLATE = [
    r"\b(?:sign ?up|register|create (?:an |a free )?account|forgot (?:your )?password\??"
    r"|remember me|email(?: address)?|username|password|phone(?: number)?"
    r"|continue with (?:google|apple|microsoft|github|email|phone)|or|and|to|continue"
    r"|welcome back|log ?in|sign ?in|submit|next|cancel|ok)\b",
    r"\bchecking your browser before accessing\s+\S+",
    r"\bthis process is automatic\b",
    r"\byour browser will redirect[^.]*\.",
    r"\bplease allow up to \d+ seconds\W*",
    r"\b(?:ddos protection|performance (?:&|and) security) by cloudflare\b",
    r"\b\S+ needs to review the security of your connection before proceeding\b",
    r"\bverify you are human by completing the action below\b",
    r"\b(?:ray id|request id)\s*[:#]?\s*[\w.-]+",
    r"\b(?:cloudflare|please|you|the|a|are|human|robot|verify|verification|security|check)\b",
    r"(?:手机号|密码|忘记密码|用户名|账号|邮箱|记住我|下一步|确定|取消|提交|立即|免费|或|并|以|继续"
    r"|查看|使用|访问|完整|内容|更多|欢迎|回来|扫码|微信|二维码|请|先|后|输入|获取|发送|向右|拖动"
    r"|滑块|完成|拼图|点击|刷新|换一张|同意|用户协议|隐私政策)",
]

_REFUSAL_TRIGGERS = [
    r"\bi(?:'m| am) sorry,?\s*(?:but\s*)?i (?:can(?:no|')t|cannot|am unable to|'m unable to"
    r"|won't|will not|am not able to)" + _SENT_END,
    r"\bi (?:can(?:no|')t|cannot|am unable to|'m unable to|won't|will not|am not able to)"
    r"\s+(?:help(?! but\b)|assist|provide|answer|comply|fulfil+|do that|discuss|engage|support"
    r"|share|respond)" + _SENT_END,
    r"\bas an ai(?: language model| assistant)?,?\s*i (?:can(?:no|')t|cannot|am unable to"
    r"|don't|do not)" + _SENT_END,
    r"\b(?:sorry|unfortunately),?\s*(?:but\s*)?(?:that's|that is|this is) (?:not something"
    r"|outside)" + _SENT_END,
    r"(?:抱歉|对不起|很抱歉|非常抱歉)[,、\s]*(?:但是?)?[,\s]*(?:我)?(?:无法|不能|没办法|不便|暂时无法)"
    + _CJK_SENT_END,
    r"(?:我)?(?:无法|不能|暂时无法)(?:回答|提供|协助|帮助|满足|讨论|处理)" + _CJK_SENT_END,
    r"这个问题我暂时无法回答" + _CJK_SENT_END,
    r"让我们换个话题再聊聊吧[。!?]?",
    r"作为(?:一个)?(?:人工智能|ai)(?:语言模型|助手)?[,]?\s*我(?:无法|不能)" + _CJK_SENT_END,
]
_REFUSAL_BOILERPLATE = [
    r"\b(?:hello|hi|sorry|unfortunately|however|thank you|thanks)\b",
    r"\b(?:is there anything else i can help (?:you )?with|let me know if (?:there's|there is)"
    r" anything else)" + _SENT_END,
    r"\bif you have (?:any )?other questions?" + _SENT_END,
    r"(?:你好|您好|抱歉|对不起|很抱歉)",
    r"(?:如果您?有其他问题|有其他问题)" + _CJK_SENT_END,
]

# Trigger search is most of the CPU of classifying an ordinary answer: about 50 patterns,
# most of them beginning with \b and a cased word, which the regex engine tries at every
# position. Per trigger (same order), words every match contains; when none is in the text,
# the pattern cannot match and is not run. () = always run (a pattern whose own literal
# prefix is already fast). Only ASCII lower-case letters and uncased characters are used, so
# plain `in` agrees with re.IGNORECASE on casefolded text unless it holds a character that
# IGNORECASE reads as an ASCII letter (_CASE_VARIANTS): then every pattern runs.
# tests/analysis/test_validity.py checks each word list against texts generated from its
# pattern.
_ERROR_NEEDLES: list[tuple[str, ...]] = [
    (
        "bad ",
        "forbidden",
        "not found",
        "gateway",
        "service",
        "internal server error",
        "too many requests",
        "method not allowed",
        "request timeout",
        "unauthorized",
    ),
    ("internal server error",),
    ("bad gateway",),
    ("gateway time",),
    ("unavailable",),
    ("something went wrong",),
    ("occurred",),
    ("rate limit exceeded", "too many requests"),
    ("network error",),
    ("page not found",),
    ("access denied",),
    ("error code",),
    (),
    (),
    (),
    (),
    (),
    (),
    (),
    ("出错了", "错误"),
    ("error", "错误"),
]
_LOGIN_NEEDLES: list[tuple[str, ...]] = [
    ("log", "sign"),
    ("you must ", "you need to "),
    ("human",),
    ("are you a robot",),
    ("captcha", "security check", "challenge"),
    ("captcha",),
    ("checking ",),
    ("just a moment",),
    ("attention required",),
    ("enable javascript and cookies to continue",),
    (),
    ("登录后", "登入后"),
    ("登录",),
    ("登录", "注册"),
    ("验证码",),
    (),
    (),
    (),
    ("滑块",),
]
_REFUSAL_NEEDLES: list[tuple[str, ...]] = [
    ("sorry",),
    ("i can", "i am ", "i 'm ", "i won't", "i will not"),
    ("as an ai",),
    ("not something", "outside"),
    ("抱歉", "对不起"),
    ("无法", "不能"),
    (),
    (),
    (),
]
# Every character other than a-z that re.IGNORECASE matches to an ASCII letter (tested).
_CASE_VARIANTS = re.compile("[A-Z\u0130\u0131\u017f\u212a]")

_ERROR_TITLE = re.compile("|".join([*_ERROR_TRIGGERS[:-1], r"^\s*(?:error|错误)\s*$"]), _F)
_LOGIN_TITLE = re.compile(
    r"^\W*(?:sign ?in|log ?in|login|just a moment|attention required|verify|captcha"
    r"|security check|are you a robot|请?登录|登入|安全验证|人机验证|验证码|身份验证)"
    r"|(?:sign ?in|log ?in|login|登录)\W*(?:[|\-\u2013\u2014:]|$)",
    _F,
)
_CAPTCHA_MARKERS = re.compile(
    r"captcha|recaptcha|hcaptcha|turnstile|geetest|challenges\.cloudflare\.com|cf-chl", _F
)
_HTML_DOC = re.compile(
    r"^\s*(?:<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>]|<\?xml)|<title[\s>]|<body[\s>]"
    r"|<form[\s>]",
    _F,
)
_JSON_ANSWER_KEYS = {"answer", "content", "text", "message_text", "choices", "output", "result"}


def _compile(patterns: list[str]) -> list[re.Pattern[str]]:
    return [re.compile(p, _F | re.MULTILINE) for p in patterns]


_Triggers = list[tuple[re.Pattern[str], tuple[str, ...]]]


def _triggers(patterns: list[str], needles: list[tuple[str, ...]]) -> _Triggers:
    return list(zip(_compile(patterns), needles, strict=True))


_ERROR_TRIGGERS_RE = _triggers(_ERROR_TRIGGERS, _ERROR_NEEDLES)
_ERROR_ALL_RE = _compile(_ERROR_TRIGGERS + _ERROR_BOILERPLATE)
_LOGIN_TRIGGERS_RE = _triggers(_LOGIN_TRIGGERS, _LOGIN_NEEDLES)
_LOGIN_ALL_RE = _compile(_LOGIN_TRIGGERS + _LOGIN_BOILERPLATE)
_REFUSAL_TRIGGERS_RE = _triggers(_REFUSAL_TRIGGERS, _REFUSAL_NEEDLES)
_REFUSAL_ALL_RE = _compile(_REFUSAL_TRIGGERS + _REFUSAL_BOILERPLATE)


# ---------------------------------------------------------------------------------- HTML


@dataclass
class _HtmlFacts:
    title: str = ""
    text_parts: list[str] = field(default_factory=list)
    password_fields: int = 0
    captcha: bool = False


class _FactParser(HTMLParser):
    _HIDDEN = frozenset({"script", "style", "template", "head"})
    _VOID = frozenset({"input", "img", "br", "hr", "meta", "link", "source", "area", "wbr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.facts = _HtmlFacts()
        self._stack: list[str] = []
        self._in_title = False
        self._title_parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k.lower(): (v or "") for k, v in attrs}
        if tag == "input" and values.get("type", "").strip().lower() == "password":
            self.facts.password_fields += 1
        marker_text = " ".join(
            values.get(k, "") for k in ("id", "class", "name", "src", "data-sitekey", "action")
        )
        if "data-sitekey" in values or _CAPTCHA_MARKERS.search(marker_text):
            self.facts.captcha = True
        if tag == "title":
            self._in_title = True
        if tag == "body":
            # An unclosed <head> must not hide the whole document.
            self._stack = [t for t in self._stack if t != "head"]
        if tag not in self._VOID:
            self._stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in self._VOID and self._stack and self._stack[-1] == tag:
            self._stack.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self._stack:
            while self._stack:
                if self._stack.pop() == tag:
                    break

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title_parts.append(data)
            return
        if any(t in self._HIDDEN for t in self._stack):
            return
        self.facts.text_parts.append(data)

    def close(self) -> None:
        super().close()
        self.facts.title = " ".join("".join(self._title_parts).split())


def _parse_html(text: str) -> _HtmlFacts:
    parser = _FactParser()
    parser.feed(text)
    parser.close()
    return parser.facts


# --------------------------------------------------------------------------------- rules


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def _content_len(text: str) -> int:
    """Letters, digits and CJK characters: what carries meaning."""
    return sum(1 for ch in text if ch.isalnum())


def _visible_len(text: str) -> int:
    """Characters that are neither whitespace nor format/control characters."""
    # Counted by deleting the others with str.translate (a C loop over a per-character
    # table) instead of a Python loop calling unicodedata for each character.
    return len(text.translate(_INVISIBLE))


def _visible_char(ch: str) -> str | None:
    """Whitespace, Cf and Cc characters are deleted, the rest kept."""
    return None if ch.isspace() or unicodedata.category(ch) in {"Cf", "Cc"} else ch


_INVISIBLE = CharTable(_visible_char)


def _triggered(folded: str, triggers: _Triggers) -> bool:
    """Whether a trigger pattern matches: `any(p.search(folded) for p in patterns)`, without
    running the patterns whose words are absent (see _ERROR_NEEDLES)."""
    if _CASE_VARIANTS.search(folded):
        return any(p.search(folded) for p, _needles in triggers)
    return any(
        (not needles or any(n in folded for n in needles)) and p.search(folded)
        for p, needles in triggers
    )


def _dominated(folded: str, triggers: _Triggers, everything: list[re.Pattern[str]]) -> bool:
    if not _triggered(folded, triggers):
        return False
    total = _content_len(folded)
    if total == 0:
        return False
    # Union of all matches, each pattern run on the same text, so the order of the patterns
    # does not matter and overlapping phrases are removed as a whole.
    covered = bytearray(len(folded))
    for pattern in everything:
        for match in pattern.finditer(folded):
            covered[match.start() : match.end()] = b"\x01" * (match.end() - match.start())
    left = sum(1 for i, ch in enumerate(folded) if not covered[i] and ch.isalnum())
    return left <= DOMINANCE_SLACK or left <= DOMINANCE_RATIO * total


def _json_error(text: str) -> bool:
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return False
    try:
        data = safejson.loads(stripped)
    except ValueError:  # also JSON nested past the limit: an answer, not an error object
        return False
    if not isinstance(data, dict):
        return False
    lowered = {str(k).lower(): v for k, v in data.items()}
    has_error = any(lowered.get(k) for k in ("error", "errors"))
    return has_error and not lowered.keys() & _JSON_ANSWER_KEYS


def _looks_like_html(text: str, raw_mime: str) -> bool:
    return "html" in raw_mime.lower() or bool(_HTML_DOC.search(text[:4096]))


def classify_answer(
    text: str | None,
    *,
    collection_state: str = "completed",
    raw_mime: str = "",
    min_chars: int = 20,
) -> Validity:
    """Classify one answer; see the module docstring for the ordered rules."""
    raw = text or ""
    facts: _HtmlFacts | None = None
    visible = raw
    if _looks_like_html(raw, raw_mime or ""):
        facts = _parse_html(raw)
        visible = " ".join(facts.text_parts)
        if facts.title and _visible_len(visible) == 0:
            visible = facts.title

    # 1. empty. Stray markup with no text ("<p></p>") is empty too; an HTML wall with a
    # password field or captcha widget but no text is not (rule 3 names it).
    if facts is not None:
        if _visible_len(visible) == 0 and not (facts.password_fields or facts.captcha):
            return Validity(False, "empty")
    elif _visible_len(raw) == 0 or (
        "<" in raw and _visible_len(" ".join(_parse_html(raw).text_parts)) == 0
    ):
        return Validity(False, "empty")

    folded = _fold(visible)

    # 2. error page
    if facts is not None and facts.title and _ERROR_TITLE.search(_fold(facts.title)):
        return Validity(False, "error_page")
    if _json_error(raw) or _dominated(folded, _ERROR_TRIGGERS_RE, _ERROR_ALL_RE):
        return Validity(False, "error_page")

    # 3. login / captcha wall
    if facts is not None and (
        facts.password_fields
        or facts.captcha
        or (facts.title and _LOGIN_TITLE.search(_fold(facts.title)))
    ):
        return Validity(False, "login_page")
    if _dominated(folded, _LOGIN_TRIGGERS_RE, _LOGIN_ALL_RE):
        return Validity(False, "login_page")

    # 4. truncated (collection state, not content)
    if (collection_state or "").strip().lower() == "truncated":
        return Validity(False, "truncated")

    # 5. refusal
    if _dominated(folded, _REFUSAL_TRIGGERS_RE, _REFUSAL_ALL_RE):
        return Validity(False, "refusal")

    # 6. too short
    if _visible_len(visible) < min_chars:
        return Validity(False, "too_short")

    return VALID

# Full-width letters and Chinese punctuation in strings are the test data here.
from __future__ import annotations

import re
import string
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from analysis import validity
from analysis.validity import REASONS, Validity, classify_answer

ORDINARY = (
    "Acme is a cloud platform popular with small teams. It offers managed databases, "
    "object storage and a generous free tier; Globex is the main alternative."
)


def reason(
    text: str | None,
    *,
    collection_state: str = "completed",
    raw_mime: str = "",
    min_chars: int = 20,
) -> str | None:
    result = classify_answer(
        text, collection_state=collection_state, raw_mime=raw_mime, min_chars=min_chars
    )
    assert isinstance(result, Validity)
    assert result.valid is (result.reason is None)
    assert result.reason is None or result.reason in REASONS
    return result.reason


def test_ordinary_answer_is_valid() -> None:
    assert classify_answer(ORDINARY) == Validity(True, None)


# Answers that are not answers, by the reason they are set aside.
BAD_ANSWERS: dict[str, list[str | None]] = {
    "empty": [
        "",
        "   \n\t ",
        "\u200b\u200b",
        None,
        "<html><body>  </body></html>",
        "<p></p>",
    ],
    "error_page": [
        "502 Bad Gateway\nnginx/1.18.0",
        "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway"
        "</h1></center><hr><center>nginx</center></body></html>",
        "<!DOCTYPE html><html><head><title>Internal Server Error</title></head><body>"
        "<p>The server encountered an internal error and was unable to complete your request."
        " Either the server is overloaded or there is an error in the application.</p>"
        "</body></html>",
        "Internal Server Error",
        "HTTP/1.1 503 Service Unavailable",
        "Something went wrong. Please try again later.",
        "Oops! Something went wrong. Error code: 1020. Ray ID: 7d2f1a9b",
        "服务器错误，请稍后再试。",
        "系统繁忙，请稍后再试",
        "抱歉，系统繁忙，请稍后重试。",
        "网络错误，请刷新页面后重试",
        "ＩＮＴＥＲＮＡＬ ＳＥＲＶＥＲ ＥＲＲＯＲ",
        '{"error": {"message": "Rate limit exceeded", "type": "rate_limit", "code": 429}}',
    ],
    "login_page": [
        "<html><head><title>Sign in</title></head><body><form><input name=u>"
        "<input type=password name=p></form></body></html>",
        # Password field alone, no telling title: structure decides.
        "<html><body><h2>Welcome</h2><form action=/s><input type='PASSWORD'></form></body></html>",
        # Captcha widget.
        '<html><body><div class="g-recaptcha" data-sitekey="x"></div></body></html>',
        "<html><head><title>Just a moment...</title></head><body>Checking your browser"
        "</body></html>",
        "<html><head><title>登录 - 某平台</title></head><body>欢迎回来</body></html>",
        "Please log in to continue.",
        "Sign in to continue to Acme",
        "请登录后查看完整内容",
        "请先登录",
        "请输入验证码",
        "人机验证：请拖动滑块完成拼图",
        "Verify you are human by completing the action below.\nexample.com needs to review the "
        "security of your connection before proceeding.\nRay ID: 7d2f1a",
        "Just a moment...\nChecking your browser before accessing example.com.\nThis process is "
        "automatic. Your browser will redirect to your requested content shortly.\nPlease "
        "allow up to 5 seconds...\nDDoS protection by Cloudflare\nRay ID: 7d2f1a",
        "Log in\nSign up\nEmail address\nPassword\nForgot password?\nContinue with Google",
        "手机号登录\n请输入手机号\n获取验证码\n登录\n注册",
    ],
    "refusal": [
        "I'm sorry, but I can't help with that.",
        "I can't help with that request.",
        "I'm sorry, but I cannot assist with this request. Is there anything else I can help "
        "you with?",
        "As an AI language model, I cannot provide real-time rankings.",
        "抱歉，我无法回答这个问题。",
        "对不起，我不能提供这方面的信息。",
        "你好，这个问题我暂时无法回答，让我们换个话题再聊聊吧。",
    ],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [(text, why) for why, texts in BAD_ANSWERS.items() for text in texts],
)
def test_bad_answers_get_their_reason(text: str | None, expected: str) -> None:
    assert reason(text) == expected


def test_empty_html_by_mime() -> None:
    assert reason("<div> <br> </div>", raw_mime="text/html; charset=utf-8") == "empty"


def test_truncated_by_collection_state() -> None:
    assert reason(ORDINARY, collection_state="truncated") == "truncated"
    assert reason(ORDINARY, collection_state="TRUNCATED") == "truncated"
    assert reason(ORDINARY, collection_state="completed") is None


def test_content_reasons_win_over_truncated() -> None:
    assert reason("", collection_state="truncated") == "empty"
    assert reason("502 Bad Gateway", collection_state="truncated") == "error_page"
    assert reason("请先登录", collection_state="truncated") == "login_page"


def test_too_short() -> None:
    assert reason("Acme is good.") == "too_short"
    assert reason("艾克米很好。") == "too_short"
    assert reason("Acme is good.", min_chars=5) is None
    # Counted on non-whitespace characters.
    assert reason("a " * 10) == "too_short"
    assert reason("a " * 20) is None


def test_short_refusal_reported_as_refusal_not_too_short() -> None:
    assert reason("我无法回答。") == "refusal"


@pytest.mark.parametrize(
    "text",
    [
        # Mentions login / sign in / password in passing.
        "To use Acme, log in to the dashboard with your company account, then open Settings "
        "and enable SSO. Acme supports SAML and OIDC.",
        "1. Go to acme.com\n2. Click Sign in\n3. Enter your email and password\n"
        "4. Choose a plan and deploy your first app.",
        "推荐使用艾克米（Acme）。它的控制台需要登录，但注册是免费的，文档也很完整，适合初创团队。",
        "艾克米支持短信验证码登录，也支持扫码登录，安全性较高，适合中小企业使用，价格也比环球便宜。",
        "Cloudflare shows a 'Verify you are human' check when traffic looks automated; Acme's "
        "CDN uses a similar bot-management feature that you can tune per route.",
        # Mentions errors in passing.
        "A 502 Bad Gateway error usually means the upstream server is down or unreachable; "
        "Acme's load balancer retries automatically.",
        "如果遇到 502 Bad Gateway 错误，通常是上游服务不可用，可以检查 Nginx 配置和后端服务是否"
        "正常运行。艾克米云提供了自动健康检查。",
        "Acme Cloud is a solid choice. Something went wrong with Globex's rollout last year, "
        "but Acme has been stable since.",
        "服务器错误率是衡量云服务稳定性的重要指标，艾克米的月度可用性达到 99.99%。",
        # Apology followed by a real answer.
        "I'm sorry, but I can't browse the internet. However, based on what I know, Acme is a "
        "popular cloud provider with strong security features and good pricing.",
        "抱歉，我无法获取实时数据。不过根据公开资料，艾克米和环球是国内市场份额最高的两家云厂商，"
        "艾克米在中小企业中更受欢迎。",
        "I cannot help but recommend Acme: it is fast, cheap and well documented.",
        "I can't provide real-time data, but Acme and Globex are the leading providers in "
        "China with strong enterprise offerings",
        "我无法提供实时排名，但艾克米和环球都是国内主流的云服务商，各有优势",
        # Markdown with inline HTML is not treated as a document.
        "**Acme** is recommended.<br>It has a free tier, good docs and a friendly community.",
        # A JSON answer body that merely contains an "error" field next to content.
        '{"answer": "Acme is a cloud provider with many regions.", "error": null}',
    ],
)
def test_ordinary_answers_mentioning_walls_or_errors_stay_valid(text: str) -> None:
    assert reason(text) is None


def test_html_answer_with_mime_is_valid() -> None:
    html = (
        "<div class='answer'><p>Acme is a widely used cloud platform.</p>"
        "<p>You log in with SSO.</p></div>"
    )
    assert reason(html, raw_mime="text/html") is None


def test_html_with_unclosed_head_is_read() -> None:
    html = "<html><head><title>Acme review</title><body><p>" + ORDINARY + "</p></body></html>"
    assert reason(html) is None


def test_rule_order_error_before_login() -> None:
    html = (
        "<html><head><title>500 Internal Server Error</title></head><body>"
        "<form><input type=password></form></body></html>"
    )
    assert reason(html) == "error_page"


def test_rule_order_refusal_before_too_short() -> None:
    assert reason("I can't help with that.", min_chars=1000) == "refusal"


def test_json_with_null_error_is_not_an_error_page() -> None:
    assert reason('{"error": null, "data": "Acme is a cloud provider with many regions."}') is None


# --- the trigger words that spare running a pattern (analysis.validity._ERROR_NEEDLES) -------

TRIGGERS = [
    *validity._ERROR_TRIGGERS_RE,
    *validity._LOGIN_TRIGGERS_RE,
    *validity._REFUSAL_TRIGGERS_RE,
]


@pytest.mark.parametrize("index", range(len(TRIGGERS)))
def test_every_text_a_trigger_matches_holds_one_of_its_words(index: int) -> None:
    pattern, needles = TRIGGERS[index]

    @settings(
        derandomize=True,
        database=None,
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(st.from_regex(pattern))
    def holds(text: str) -> None:
        folded = validity._fold(text)  # what classify_answer searches: no upper case left
        assume(pattern.search(folded))
        assert validity._triggered(folded, [(pattern, needles)])
        assert (
            validity._CASE_VARIANTS.search(folded)
            or not needles
            or any(n in folded for n in needles)
        )

    holds()


def test_case_variants_are_every_character_ignorecase_reads_as_an_ascii_letter() -> None:
    letters = string.ascii_lowercase
    caseless = re.compile("[a-z]", re.IGNORECASE)
    literal = [re.compile(x, re.IGNORECASE) for x in letters]
    for code in range(sys.maxunicode + 1):
        ch = chr(code)
        if ch in letters:
            continue
        if caseless.fullmatch(ch) or (
            any(c in string.ascii_letters for c in ch.lower() + ch.upper() + ch.casefold())
            and any(x.fullmatch(ch) for x in literal)
        ):
            assert validity._CASE_VARIANTS.fullmatch(ch), hex(code)


def test_a_text_with_a_case_variant_runs_every_trigger() -> None:
    # The dotless "ı" survives folding and is "i" to re.IGNORECASE: "ı can't help" is a
    # refusal, though none of the pattern's words ("i can", ...) is in the text.
    text = "ı can't help with that."
    assert reason(text) == "refusal"
    assert reason(ORDINARY) is None

"""Word lists of the rule analyser (`analysis.context`), English and Chinese.

Written as general vocabulary for each role, not from the golden set's sentences. Changing a
list changes what the analyser says: bump `analysis.context.RULE_VERSION` with it.
"""

from __future__ import annotations

import re

# Aliases that are everyday words in some sense; a campaign alias found here is treated as
# ambiguous even if the campaign did not mark it, and the plan preview warns about it.
COMMON_WORDS = frozenset(
    {
        # English
        "apple", "oracle", "snowflake", "amazon", "shell", "target", "subway", "jaguar",
        "puma", "dove", "mercury", "delta", "corona", "windows", "office", "notion", "slack",
        "zoom", "square", "stripe", "box", "mint", "gap", "next", "visa", "orange", "ring",
        "nest", "signal", "bolt", "monday", "meta", "x", "sky", "diesel", "fossil", "coach",
        "guess", "canon", "sharp",
        # Chinese
        "苹果", "小米", "环球", "甲骨文", "大众", "长城", "红旗", "美的", "长安", "平安",
        "光明", "理想", "雪花",
    }
)  # fmt: skip


def _words(*items: str) -> re.Pattern[str]:
    """A case-insensitive pattern of English phrases on word boundaries."""
    return re.compile(r"\b(?:" + "|".join(items) + r")\b", re.IGNORECASE)


def _chars(*items: str) -> re.Pattern[str]:
    """A pattern of Chinese phrases (no boundaries in CJK text)."""
    return re.compile("|".join(items))


# --- sense: is an ambiguous alias used as the brand, or as an everyday word? --------------

BRAND_SENSE = (
    _words(
        r"compan(?:y|ies)", r"inc", r"corp(?:oration)?", r"brands?", r"products?", r"phones?",
        r"smartphones?", r"iphone", r"ipad", r"mac(?:book)?", r"ios", r"android", r"apps?",
        r"app store", r"music", r"tv", r"watch", r"laptops?", r"tablets?", r"software",
        r"platforms?", r"cloud", r"databases?", r"db", r"sql", r"data ?warehouses?",
        r"warehouses?", r"analytics", r"licen[cs](?:e|es|ing)", r"servers?", r"api", r"sdk",
        r"drivers?", r"enterprises?", r"startups?", r"pricing", r"subscriptions?",
        r"customers?", r"revenue", r"stocks?", r"shares", r"market", r"sales", r"flagship",
        r"launch(?:ed|es)?", r"released?", r"announced", r"ceo", r"headquarter(?:s|ed)",
        r"acquired", r"ecosystems?", r"tooling", r"workloads?", r"free tier", r"vendors?",
        r"dbas?", r"deploy(?:ment|ments|ed)?", r"features?", r"devices?", r"chips?",
    ),
    _chars(
        "公司", "集团", "品牌", "手机", "平板", "手环", "电脑", "笔记本", "系统", "生态",
        "发布", "新款", "机型", "旗舰", "售后", "官网", "官方", "门店", "销量", "股价",
        "市值", "财报", "营收", "软件", "数据库", "云", "许可证", "授权", "性价比", "拍照",
        "续航", "汽车", "芯片", "用户", "产品", "版本", "企业", "客服", "部署", "型号",
    ),
)  # fmt: skip

OTHER_SENSE = (
    _words(
        r"eat(?:s|ing)?", r"ate", r"food", r"fruits?", r"juice", r"pies?", r"crumble",
        r"cakes?", r"trees?", r"orchards?", r"recipes?", r"desserts?", r"breakfast", r"lunch",
        r"dinner", r"snacks?", r"bananas?", r"pears?", r"vitamins?", r"healthy", r"doctor",
        r"a day", r"big apple", r"new york", r"delphi", r"greek", r"ancient", r"temples?",
        r"prophec(?:y|ies)", r"myths?", r"gods?", r"matrix", r"neo", r"bones?",
        r"inscriptions?", r"dynast(?:y|ies)", r"snow(?:ing|fall)?", r"winter", r"weather",
        r"cold", r"ice", r"gloves?", r"christmas", r"forecast", r"cooking", r"baked?",
        r"garden", r"harvest", r"seeds?", r"grains?", r"sky", r"rain",
    ),
    _chars(
        "吃", "早餐", "午餐", "晚餐", "粥", "果汁", "汁", "派", "果园", "水果", "摘", "梨",
        "香蕉", "营养", "斤", "种了", "种植", "高粱", "小麦", "大米", "粮食", "步枪", "年代",
        "商朝", "文字", "考古", "雪", "冬天", "旅行", "影城", "电影", "音乐", "唱片", "时报",
        "邮轮", "世界", "食物", "健康", "功效", "养胃", "做饭", "甜点", "菜谱", "天气",
    ),
)  # fmt: skip

# --- what the answer says about an entity -------------------------------------------------

ABSENCE = (
    _words(
        r"(?:could ?n[o']?t|can ?n?[o']?t|cannot|was unable to|unable to|did ?n[o']?t|failed to)"
        r" (?:find|locate|verify|say much|confirm)",
        r"no (?:reliable |available |public |verified |recent |specific )?"
        r"(?:information|info|data|details|records|knowledge)",
        r"(?:not|n't) (?:familiar|aware)",
        r"(?:never|not|n't) (?:heard of|come across)",
        r"(?:do|did) ?n[o']?t (?:know|recogni[sz]e)",
        r"(?:do|did) ?n[o']?t have (?:any |reliable |enough )?(?:information|info|data|details)",
        r"not a \w+ i have (?:any )?(?:data|information|details)",
        r"(?:does|do) ?n[o']?t (?:exist|appear)", r"no such", r"inconclusive",
        r"nothing (?:about|on)", r"anything (?:about|on)",
    ),
    _chars(
        r"没有找到", r"未找到", r"找不到", r"无法找到", r"没有查到", r"查不到", r"未能找到",
        r"没有(?:关于|有关)?[^，。；]{0,12}(?:信息|资料|数据)",
        r"暂无[^，。；]{0,8}(?:信息|资料|数据)",
        r"不(?:太)?了解", r"不(?:太)?熟悉", r"不知道", r"不清楚", r"不存在", r"没听说过",
        r"没有听说", r"无法(?:给出)?评价",
    ),
)  # fmt: skip

RECOMMEND = (
    _words(
        r"recommend(?:s|ed)?", r"best", r"top (?:pick|choice)", r"my pick", r"go with",
        r"i(?:'d| would) (?:pick|choose|go for)", r"pick", r"choose", r"consider",
        r"worth (?:a look|trying|considering|it)", r"first choice", r"ideal",
        r"suggest(?:ed)?", r"picks", r"try",
    ),
    _chars(
        r"推荐", r"首选", r"最佳", r"建议(?:选择|使用|选)", r"可以试试", r"试试", r"值得",
        r"看看", r"次之", r"选", r"最好的",
    ),
)  # fmt: skip

NEGATIVE = (
    _words(
        r"avoid", r"steer clear", r"not recommended", r"(?:would|do|did) ?n[o']?t recommend",
        r"(?:would|do) ?n[o']?t buy", r"complain(?:s|ts?)?", r"crash(?:es|ed)?",
        r"outages?", r"slow", r"buggy", r"overpriced", r"clunky", r"outdated", r"hate",
        r"poor", r"worse", r"worst", r"problems?", r"issues", r"incidents?", r"concerning",
        r"be careful", r"overheats?", r"unreliable", r"full of ads", r"not my first pick",
        r"expensive", r"drawbacks?", r"lacks?",
    ),
    _chars(
        r"不建议", r"不推荐", r"避开", r"避免", r"慢", r"投诉", r"宕机", r"问题", r"较差", r"很差",
        r"老旧", r"发热", r"下滑", r"费用很高", r"卡顿", r"不好用", r"不稳定", r"缺点", r"偏高",
    ),
)  # fmt: skip

POSITIVE = (
    _words(
        r"good", r"great", r"excellent", r"strong", r"reliable", r"solid", r"best", r"easy",
        r"easier", r"affordable", r"cheap(?:er|est)?", r"popular", r"leader", r"polished",
        r"fast", r"generous", r"flexible", r"scales", r"recommend(?:ed)?", r"top pick",
        r"great fit", r"favou?rite", r"leads?", r"more tools", r"more control",
        r"free tier", r"outstanding", r"impressive",
    ),
    _chars(
        r"好", r"出色", r"优秀", r"性价比", r"实惠", r"快", r"受欢迎", r"领先", r"流畅",
        r"开放", r"灵活", r"便宜", r"易用", r"全面", r"超预期", r"值得", r"推荐", r"首选",
        r"最佳", r"更强", r"广泛使用", r"功能多",
    ),
)  # fmt: skip

COMPARE = (
    _words(
        r"vs\.?",
        r"versus",
        r"compared",
        r"than",
        r"unlike",
        r"beats?",
        r"over",
        r"both",
        r"as much as",
        r"whereas",
        r"while",
    ),
    _chars(r"相比", r"比", r"对比", r"不如", r"优于", r"哪个", r"前者", r"后者", r"更"),
)

# Where a recommendation stops applying to later names: "X over Y", "X比Y".
COMPARE_STOP = (_words(r"over", r"than", r"rather than", r"instead of"), _chars(r"比", r"相比"))

# "..., but it is reliable": what follows a contrast is about the entity too.
CONTRAST = (_words(r"but", r"however", r"although", r"though"), _chars(r"但", r"不过", r"然而"))

# Negations that turn a recommendation word around ("not recommended", "不推荐").
NEGATED_RECOMMEND = (
    _words(r"not recommended", r"(?:would|do|did) ?n[o']?t recommend", r"not my first pick"),
    _chars(r"不推荐", r"不建议", r"不值得"),
)

# A list whose items are recommendations: its lead-in line says so.
LIST_LEAD = (
    _words(
        r"recommend(?:ed|ations)?",
        r"best",
        r"top",
        r"picks?",
        r"ranking",
        r"ranked",
        r"worth",
        r"options",
        r"choices",
        r"suggest(?:ed|ions)?",
    ),
    _chars(r"推荐", r"排名", r"排行", r"首选", r"最佳", r"值得", r"选择"),
)


def hits(patterns: tuple[re.Pattern[str], ...], text: str) -> list[re.Match[str]]:
    return [m for pattern in patterns for m in pattern.finditer(text)]


def any_hit(patterns: tuple[re.Pattern[str], ...], text: str) -> bool:
    return any(pattern.search(text) for pattern in patterns)

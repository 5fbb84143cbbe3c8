"""Telepathy gym tasks: a built-in list of entities with attributes, and UserRL's 401 entities.

Built-in entities carry a set of true attributes from `ATTRIBUTES` (every other attribute is
false), which lets the scripted oracle answer yes/no questions by keyword matching. The split
is fixed: every third entity is a test task. Public entities keep UserRL's published split
(360 / 41) when its parquets are at or under the source, else 10% go to test by a stable hash. Public entities have only a title and a free-text
description, so the scripted oracle is much weaker on them (see README.md).
"""

from __future__ import annotations

from gyms.common.tasks import by_split, public_splits, task_maker

GYM_NAME = "telepathy"
CHOICES = ("action", "answer")

# attribute -> question keywords (checked in this order; the first hit decides the answer)
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "fictional": ("fictional", "imaginary", "made up", "fiction", "cartoon", "myth"),
    "scientist": ("scientist", "science", "physics", "chemistry"),
    "music": ("music", "musician", "composer", "instrument", "sing"),
    "sport": ("sport", "athlete", "tennis"),
    "historical": ("historical", "history", "century", "dead", "past"),
    "manmade": ("manmade", "man made", "artificial", "invented", "built"),
    "person": ("person", "human", "people", "man", "woman"),
    "mammal": ("mammal",),
    "bird": ("bird", "feathers"),
    "pet": ("pet", "domestic", "domesticated"),
    "animal": ("animal", "creature"),
    "fruit": ("fruit",),
    "vegetable": ("vegetable",),
    "food": ("food", "eat", "edible", "eaten"),
    "plant": ("plant", "grow", "tree"),
    "planet": ("planet",),
    "space": ("space", "sky", "universe", "star"),
    "vehicle": ("vehicle", "transport", "ride", "drive", "travel"),
    "machine": ("machine", "electronic", "electricity", "device", "battery"),
    "building": ("building", "structure", "tower", "wall"),
    "country": ("country", "nation"),
    "city": ("city", "town", "capital"),
    "place": ("place", "location", "visit", "landmark"),
    "europe": ("europe", "european"),
    "asia": ("asia", "asian"),
    "america": ("america", "american"),
    "africa": ("africa", "african"),
    "water": ("water", "sea", "ocean", "swim"),
    "flies": ("fly", "flies", "flying", "wings"),
    "natural": ("natural", "nature"),
    "sweet": ("sweet", "sugar"),
    "red": ("red",),
    "yellow": ("yellow",),
    "orange": ("orange",),
    "brown": ("brown",),
    "black": ("black",),
    "big": ("big", "bigger", "large", "larger", "huge"),
    "small": ("small", "smaller", "tiny", "pocket"),
    "hot": ("hot", "warm", "heat"),
    "famous": ("famous", "well known"),
    "real": ("real", "exist"),
}

# name, aliases, category, true attributes
ENTITIES: list[tuple[str, tuple[str, ...], str, str]] = [
    ("Albert Einstein", ("Einstein",), "person", "person real scientist historical europe famous"),
    ("Marie Curie", ("Curie",), "person", "person real scientist historical europe famous"),
    (
        "Wolfgang Amadeus Mozart",
        ("Mozart",),
        "person",
        "person real music historical europe famous",
    ),
    ("Serena Williams", ("Serena",), "person", "person real sport america famous"),
    ("Sherlock Holmes", ("Holmes",), "character", "person fictional europe famous"),
    ("Harry Potter", (), "character", "person fictional europe famous"),
    ("Mickey Mouse", (), "character", "animal mammal fictional america famous small"),
    ("Dragon", (), "creature", "animal fictional flies big hot"),
    ("Elephant", (), "animal", "animal mammal real natural big africa asia"),
    ("Penguin", (), "animal", "animal bird real natural water black small"),
    ("Dolphin", (), "animal", "animal mammal real natural water"),
    ("Eagle", (), "animal", "animal bird real natural flies america"),
    ("Cat", ("house cat",), "animal", "animal mammal pet real natural small"),
    ("Dog", (), "animal", "animal mammal pet real natural"),
    ("Shark", (), "animal", "animal real natural water big"),
    ("Banana", (), "food", "food fruit plant yellow sweet real natural"),
    ("Carrot", (), "food", "food vegetable plant orange real natural"),
    ("Strawberry", (), "food", "food fruit plant red sweet small real natural"),
    ("Pizza", (), "food", "food manmade real europe hot"),
    ("Chocolate", (), "food", "food sweet brown manmade real"),
    ("Bicycle", ("bike",), "object", "vehicle manmade real"),
    ("Airplane", ("plane", "aeroplane"), "object", "vehicle machine manmade flies big real"),
    ("Smartphone", ("phone", "mobile phone"), "object", "machine manmade small real"),
    ("Piano", (), "object", "music manmade big real"),
    ("Eiffel Tower", (), "landmark", "place building manmade europe big famous real"),
    (
        "Great Wall of China",
        ("Great Wall",),
        "landmark",
        "place building manmade asia big famous historical real",
    ),
    ("Mount Everest", ("Everest",), "place", "place natural asia big famous real"),
    ("Japan", (), "place", "place country asia real"),
    ("Brazil", (), "place", "place country america real"),
    ("Paris", (), "place", "place city europe famous real"),
    ("The Moon", ("Moon",), "celestial body", "space natural big real"),
    ("Mars", (), "celestial body", "space planet natural red big real"),
    ("The Sun", ("Sun",), "celestial body", "space natural yellow hot big real"),
]
DESCRIPTION = (
    "You are playing twenty questions. The environment is thinking of an entity; find it by "
    "asking yes-or-no questions, then name it."
)
RULES = (
    "- `action`: one yes-or-no question; the reply is Yes, No or Maybe.\n"
    "- `answer`: your guess (a name). A correct guess wins; you may guess more than once.\n"
    "Questions are limited, so narrow down the category first."
)


def first_user(category: str) -> str:
    return f"I am thinking of something in the category: {category}. Ask me yes-or-no questions and guess what it is!"


def builtin_payloads() -> list[dict]:
    out = []
    for name, aliases, category, attrs in ENTITIES:
        attributes = sorted(set(attrs.split()))
        unknown = set(attributes) - set(ATTRIBUTES)
        assert not unknown, f"{name}: unknown attributes {unknown}"
        out.append(
            {
                "name": name,
                "aliases": list(aliases),
                "category": category,
                "attributes": attributes,
                "description": "",
            }
        )
    return out


_task = task_maker(
    GYM_NAME, DESCRIPTION, CHOICES, RULES, lambda payload: first_user(payload["category"])
)


def build_tasks(source=None, seed: int = 0, options: dict | None = None) -> dict:
    if source is None:
        tasks = [
            _task(f"telepathy-{i:03d}", "test" if i % 3 == 2 else "train", p, "builtin")
            for i, p in enumerate(builtin_payloads())
        ]
        return by_split(tasks)
    from data_prep.userrl import read_telepathy_entities

    tasks = []
    rows = read_telepathy_entities(source)
    for row, split in public_splits(source, GYM_NAME, rows, "title", 0.1):
        title = row["title"]
        aliases = [title[4:]] if title.lower().startswith("the ") else []
        payload = {
            "name": title,
            "aliases": aliases,
            "category": row["category"].replace("_", " "),
            "attributes": None,
            "description": row["target"],
        }
        tasks.append(_task(f"telepathy-{row['id']}", split, payload, "userrl"))
    return by_split(tasks)

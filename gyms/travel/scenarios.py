"""Travel scenarios: the option catalogue, traveller preferences as attribute constraints, generation.

A scenario is a trip that needs one choice for each of a few aspects (flight, hotel, apartment,
restaurant, rental car). Every aspect has options with attributes and a price, and the traveller
has preferences, each one constraint on one attribute, phrased implicitly ("Layovers wear me out"
rather than "stops <= 0"). The best option is the cheapest one meeting every preference; others
meeting them all are acceptable. Generation guarantees exactly one best option, at least one
acceptable pricier option, and for every preference a cheaper decoy that breaks only that one, so
an agent that skips a preference picks a wrong option.

Pure data and rules: no I/O, no users, no rewards (see env.py).
"""

from __future__ import annotations

import random
from typing import Any

# Each attribute: the values options may take and the preferences a traveller may hold about it,
# as (op, value, implicit phrasing). Every preference must be satisfiable and breakable.
CATALOGUE: dict[str, dict[str, Any]] = {
    "flight": {
        "prefix": "F",
        "price_range": (120, 900),
        "price_unit": "per ticket",
        "keywords": ("flight", "fly", "flying", "airline", "plane", "air travel"),
        "attributes": {
            "stops": (
                [0, 1, 2],
                [
                    ("<=", 0, "Layovers wear me out, so I want to get there in one go."),
                    ("<=", 1, "One change of planes is fine, but not more than that."),
                ],
            ),
            "departure": (
                ["morning", "afternoon", "evening", "overnight"],
                [
                    (
                        "!=",
                        "overnight",
                        "I can never sleep on a plane, so I don't want to fly through the night.",
                    ),
                    ("==", "morning", "I like to land with most of the day still ahead of me."),
                ],
            ),
            "cabin": (
                ["economy", "premium economy", "business"],
                [("!=", "economy", "My back can't take a standard narrow seat for hours.")],
            ),
            "checked_bag": (
                [True, False],
                [
                    (
                        "==",
                        True,
                        "I'm bringing a big suitcase, so luggage has to be included in the fare.",
                    )
                ],
            ),
            "wifi": (
                [True, False],
                [("==", True, "I have to answer work emails during the trip, even in the air.")],
            ),
        },
    },
    "hotel": {
        "prefix": "H",
        "price_range": (70, 420),
        "price_unit": "per night",
        "keywords": ("hotel", "stay", "room", "accommodation", "lodging", "sleep"),
        "attributes": {
            "stars": (
                [2, 3, 4, 5],
                [
                    (">=", 4, "I don't want a place that feels cheap; I like a bit of luxury."),
                    (">=", 3, "A very basic place would make me uneasy."),
                ],
            ),
            "area": (
                ["downtown", "old town", "beach", "airport"],
                [
                    ("==", "beach", "I'd love to hear the waves from my room."),
                    ("!=", "airport", "I don't want to be stuck out by the runways."),
                ],
            ),
            "breakfast": (
                [True, False],
                [
                    (
                        "==",
                        True,
                        "I can't function without a proper meal before heading out in the morning.",
                    )
                ],
            ),
            "pool": ([True, False], [("==", True, "The kids will want to swim every evening.")]),
            "parking": (
                [True, False],
                [("==", True, "We're arriving with our own car and need somewhere to leave it.")],
            ),
        },
    },
    "apartment": {
        "prefix": "A",
        "price_range": (60, 360),
        "price_unit": "per night",
        "keywords": ("apartment", "flat", "rental home", "airbnb", "place to rent"),
        "attributes": {
            "bedrooms": (
                [1, 2, 3],
                [
                    (">=", 2, "My sister is coming along and we each want our own room."),
                    (">=", 3, "There are three couples in our group, each needing privacy."),
                ],
            ),
            "kitchen": (
                [True, False],
                [("==", True, "I love cooking my own meals when I travel.")],
            ),
            "pets_allowed": ([True, False], [("==", True, "My dog comes everywhere with me.")]),
            "elevator": (
                [True, False],
                [("==", True, "My knees can't handle climbing many stairs.")],
            ),
            "location": (
                ["city center", "suburbs", "waterfront"],
                [
                    ("!=", "suburbs", "I don't want a long commute into town every day."),
                    ("==", "waterfront", "Waking up to a view of the water would make the trip."),
                ],
            ),
        },
    },
    "restaurant": {
        "prefix": "R",
        "price_range": (15, 95),
        "price_unit": "per person",
        "keywords": ("restaurant", "dinner", "lunch", "eat", "food", "cuisine", "dining", "meal"),
        "attributes": {
            "cuisine": (
                ["Italian", "Japanese", "Mexican", "Indian", "French", "Thai"],
                [
                    (
                        "not in",
                        ["Indian", "Thai", "Mexican"],
                        "Spicy food and my stomach don't get along.",
                    ),
                    ("in", ["Japanese"], "I've been craving sushi all week."),
                ],
            ),
            "vegetarian_options": ([True, False], [("==", True, "My partner doesn't eat meat.")]),
            "outdoor_seating": (
                [True, False],
                [("==", True, "It would be lovely to eat in the open air.")],
            ),
            "noise": (
                ["quiet", "moderate", "lively"],
                [("==", "quiet", "I'd like to actually hear the people at my table.")],
            ),
            "reservations": (
                [True, False],
                [("==", True, "I hate standing in line without knowing if we'll get a table.")],
            ),
        },
    },
    "car": {
        "prefix": "C",
        "price_range": (25, 130),
        "price_unit": "per day",
        "keywords": ("car", "rental car", "vehicle", "drive", "driving"),
        "attributes": {
            "type": (
                ["compact", "sedan", "SUV", "minivan"],
                [
                    ("in", ["SUV", "minivan"], "We'll be five people with a lot of gear."),
                    (
                        "==",
                        "compact",
                        "The old streets there are narrow and I'm nervous about parking.",
                    ),
                ],
            ),
            "transmission": (
                ["automatic", "manual"],
                [("==", "automatic", "I never learned to drive stick.")],
            ),
            "fuel": (
                ["petrol", "hybrid", "electric"],
                [("!=", "petrol", "I try to keep my carbon footprint small.")],
            ),
            "unlimited_mileage": (
                [True, False],
                [("==", True, "We plan long drives all over the region.")],
            ),
        },
    },
}
ASPECTS: tuple[str, ...] = tuple(CATALOGUE)
ASPECT_NAMES = {
    "flight": "flight",
    "hotel": "hotel",
    "apartment": "apartment",
    "restaurant": "restaurant",
    "car": "rental car",
}
CITIES = (
    "Lisbon",
    "Kyoto",
    "Austin",
    "Cape Town",
    "Vancouver",
    "Prague",
    "Oaxaca",
    "Hanoi",
    "Reykjavik",
    "Porto",
    "Seville",
    "Melbourne",
    "Edinburgh",
    "Istanbul",
    "Montreal",
    "Marrakesh",
)
MONTHS = ("March", "April", "May", "June", "September", "October", "November")


def satisfies(option: dict, pref: dict) -> bool:
    """Does `option` meet preference `pref` ({"attribute", "op", "value"})?"""
    have, op, want = option[pref["attribute"]], pref["op"], pref["value"]
    if op == "==":
        return have == want
    if op == "!=":
        return have != want
    if op == "<=":
        return have <= want
    if op == ">=":
        return have >= want
    if op == "in":
        return have in want
    if op == "not in":
        return have not in want
    raise ValueError(f"unknown preference op {op!r}")


def _values(aspect: str, attribute: str) -> list:
    return CATALOGUE[aspect]["attributes"][attribute][0]


def _set_to(option: dict, aspect: str, pref: dict, want_ok: bool, rng: random.Random) -> None:
    choices = [
        v
        for v in _values(aspect, pref["attribute"])
        if satisfies({pref["attribute"]: v}, pref) == want_ok
    ]
    option[pref["attribute"]] = rng.choice(choices)


def _random_attrs(aspect: str, rng: random.Random) -> dict:
    return {
        name: rng.choice(values) for name, (values, _) in CATALOGUE[aspect]["attributes"].items()
    }


def _sample_preferences(aspect: str, count: int, rng: random.Random) -> list[dict]:
    attributes = list(CATALOGUE[aspect]["attributes"])
    chosen = rng.sample(attributes, min(count, len(attributes)))
    prefs = []
    for attribute in chosen:
        op, value, text = rng.choice(CATALOGUE[aspect]["attributes"][attribute][1])
        prefs.append({"attribute": attribute, "op": op, "value": value, "text": text})
    return prefs


def _unique_price(low: int, high: int, used: set[int], rng: random.Random) -> int:
    for _ in range(1000):
        price = rng.randint(max(1, low), max(low + 1, high))
        if price not in used:
            used.add(price)
            return price
    raise RuntimeError("could not draw a unique price")  # unreachable with the catalogue's ranges


def make_options(
    aspect: str, prefs: list[dict], num_options: int, rng: random.Random
) -> list[dict]:
    """Options for one aspect: one best, one or more acceptable, one decoy per preference, fillers."""
    low, high = CATALOGUE[aspect]["price_range"]
    span = high - low
    best_price = rng.randint(low + span // 3, low + (2 * span) // 3)
    used = {best_price}
    options = []

    def option(ok_flags: list[bool], price: int) -> dict:
        attrs = _random_attrs(aspect, rng)
        for pref, ok in zip(prefs, ok_flags, strict=True):
            _set_to(attrs, aspect, pref, ok, rng)
        return {**attrs, "price": price}

    options.append(option([True] * len(prefs), best_price))
    options.append(
        option([True] * len(prefs), _unique_price(best_price + 1, high + span // 4, used, rng))
    )
    for i in range(len(prefs)):
        flags = [j != i for j in range(len(prefs))]
        options.append(option(flags, _unique_price(low, best_price - 1, used, rng)))
    while len(options) < num_options:
        flags = [rng.random() < 0.5 for _ in prefs]
        if all(flags) and prefs:
            flags[rng.randrange(len(prefs))] = False
        options.append(option(flags, _unique_price(low, high + span // 4, used, rng)))
    rng.shuffle(options)
    prefix = CATALOGUE[aspect]["prefix"]
    return [{"id": f"{prefix}{i + 1}", **o} for i, o in enumerate(options)]


def rank_options(options: list[dict], prefs: list[dict]) -> tuple[str, list[str]]:
    """(best id, ids of every option meeting all preferences, cheapest first)."""
    ok = sorted(
        (o for o in options if all(satisfies(o, p) for p in prefs)), key=lambda o: o["price"]
    )
    if not ok:
        raise ValueError("no option meets every preference")
    return ok[0]["id"], [o["id"] for o in ok]


def make_scenario(
    rng: random.Random, num_aspects: int, prefs_per_aspect: int, num_options: int
) -> dict:
    """One trip: destination, dates, and per aspect its options, preferences, best and acceptable ids."""
    if num_options < prefs_per_aspect + 2:
        raise ValueError(
            f"num_options must be at least prefs_per_aspect + 2 ({prefs_per_aspect + 2})"
        )
    aspects = rng.sample(list(ASPECTS), num_aspects)
    if "hotel" in aspects and "apartment" in aspects:  # one place to sleep per trip
        aspects[aspects.index("apartment")] = rng.choice([a for a in ASPECTS if a not in aspects])
    trip = {
        "destination": rng.choice(CITIES),
        "month": rng.choice(MONTHS),
        "start_day": rng.randint(1, 20),
        "nights": rng.randint(2, 9),
        "aspects": [],
    }
    for aspect in aspects:
        prefs = _sample_preferences(aspect, prefs_per_aspect, rng)
        options = make_options(aspect, prefs, num_options, rng)
        best, acceptable = rank_options(options, prefs)
        trip["aspects"].append(
            {
                "name": aspect,
                "preferences": prefs,
                "options": options,
                "best": best,
                "acceptable": acceptable,
            }
        )
    return trip


def describe_option(option: dict, aspect: str) -> str:
    """One line for search results: `H3: $182 per night | stars: 4 | area: beach | ...`."""
    unit = CATALOGUE[aspect]["price_unit"]
    parts = [f"{option['id']}: ${option['price']} {unit}"]
    for name in CATALOGUE[aspect]["attributes"]:
        value = option[name]
        shown = ("yes" if value else "no") if isinstance(value, bool) else str(value)
        parts.append(f"{name.replace('_', ' ')}: {shown}")
    return " | ".join(parts)


def find_aspects(text: str, among: list[str] | None = None) -> list[str]:
    """Aspects whose keywords occur in `text` (word-prefix match, case-insensitive), in catalogue order."""
    import re

    low = text.lower()
    found = []
    for aspect in among or ASPECTS:
        words = CATALOGUE[aspect]["keywords"] + (aspect,)
        if any(re.search(r"\b" + re.escape(w) + r"(s|es)?\b", low) for w in words):
            found.append(aspect)
    return found

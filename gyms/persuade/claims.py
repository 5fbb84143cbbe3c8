"""The built-in claims for the persuasion gym, written for mua.

Each claim comes with counter-arguments the scripted persuadee finds convincing; a point is
raised when any of its keywords occurs in the agent's message (whole words, light stemming).
"""

from __future__ import annotations


def _p(point: str, *keywords: str) -> dict:
    return {"point": point, "keywords": list(keywords)}


CLAIMS: list[dict] = [
    {
        "claim": "Homework should be banned in primary schools.",
        "points": [
            _p(
                "Practice at home consolidates what children learn in class.",
                "practice",
                "consolidate",
                "reinforce",
            ),
            _p(
                "Homework teaches responsibility and time management.",
                "responsibility",
                "time management",
                "discipline",
            ),
            _p(
                "Homework lets parents see and support their child's progress.",
                "parents",
                "involvement",
            ),
        ],
    },
    {
        "claim": "Cities should ban all private cars from their centres.",
        "points": [
            _p(
                "Disabled and elderly people depend on cars for access.",
                "disabled",
                "elderly",
                "mobility",
            ),
            _p(
                "Small shops lose customers and deliveries suffer.",
                "shops",
                "business",
                "deliveries",
            ),
            _p(
                "Public transport is not yet good enough to replace cars.",
                "public transport",
                "buses",
                "capacity",
            ),
        ],
    },
    {
        "claim": "Social media does more harm than good.",
        "points": [
            _p(
                "It keeps distant families and friends connected.",
                "connected",
                "families",
                "friends",
            ),
            _p(
                "It gives a voice to people and movements ignored by traditional media.",
                "voice",
                "movements",
                "activism",
            ),
            _p(
                "Small businesses reach customers cheaply through it.",
                "small businesses",
                "customers",
                "marketing",
            ),
        ],
    },
    {
        "claim": "Space exploration is a waste of money.",
        "points": [
            _p(
                "Satellites give us weather forecasts, GPS and communications.",
                "satellites",
                "gps",
                "weather",
            ),
            _p(
                "Space research produced medical and material technologies.",
                "technologies",
                "medical",
                "spin off",
            ),
            _p(
                "It inspires students to study science and engineering.",
                "inspire",
                "inspires",
                "students",
            ),
        ],
    },
    {
        "claim": "Video games make children violent.",
        "points": [
            _p(
                "Large studies find no causal link between games and violence.",
                "studies",
                "research",
                "evidence",
            ),
            _p("Youth violence fell while gaming grew.", "fell", "declined", "decreased"),
            _p(
                "Many games teach cooperation and problem solving.",
                "cooperation",
                "problem solving",
                "teamwork",
            ),
        ],
    },
    {
        "claim": "Remote work is bad for productivity.",
        "points": [
            _p(
                "Measured output rose in many firms that went remote.",
                "output",
                "measured",
                "productive",
            ),
            _p("No commute gives workers more time and energy.", "commute", "commuting", "energy"),
            _p(
                "Fewer office interruptions allow deep focus.",
                "interruptions",
                "focus",
                "distractions",
            ),
        ],
    },
    {
        "claim": "Zoos should be abolished.",
        "points": [
            _p(
                "Zoos run breeding programmes that save endangered species.",
                "endangered",
                "breeding",
                "species",
            ),
            _p("Zoos fund and carry out conservation research.", "conservation", "research"),
            _p(
                "Seeing animals teaches children to care about wildlife.",
                "education",
                "teach",
                "children",
            ),
        ],
    },
    {
        "claim": "Nuclear power is too dangerous to use.",
        "points": [
            _p(
                "Per unit of energy nuclear causes fewer deaths than coal or gas.",
                "deaths",
                "safest",
                "safety record",
            ),
            _p("It produces almost no carbon emissions.", "carbon", "emissions", "climate"),
            _p(
                "Modern reactor designs shut down passively.",
                "modern reactors",
                "passive",
                "design",
            ),
        ],
    },
    {
        "claim": "Tipping in restaurants should be abolished.",
        "points": [
            _p("Tips reward good service directly.", "reward", "good service", "incentive"),
            _p("Many servers rely on tips to earn a living wage.", "wage", "income", "earn"),
            _p("Customers keep some control over what they pay.", "control", "choice", "choose"),
        ],
    },
]

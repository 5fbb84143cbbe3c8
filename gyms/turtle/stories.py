"""The built-in turtle-soup stories, written for mua.

Each story has a surface (what the agent sees), a bottom (the hidden truth) and weighted
criteria; each criterion lists keyword groups for the scripted judge (a group is met when any
of its words occurs in the explanation). Weights of a story sum to 1.
"""

from __future__ import annotations


def _c(statement: str, weight: float, *groups: tuple[str, ...]) -> dict:
    return {"statement": statement, "weight": weight, "keywords": [list(g) for g in groups]}


STORIES: list[dict] = [
    {
        "title": "The Stopped Watch",
        "surface": "A climber found a stopped watch on a summit and immediately called the police.",
        "bottom": "The watch belonged to the climber's brother, who had vanished on the mountain years earlier. "
        "It had stopped when he died on the summit, which proved that his guide lied about the accident "
        "and had abandoned him there.",
        "criteria": [
            _c(
                "The watch belonged to the climber's missing brother.",
                0.4,
                ("brother",),
                ("watch",),
            ),
            _c(
                "The guide lied about what happened and abandoned him.",
                0.3,
                ("guide",),
                ("lied", "lie", "abandoned"),
            ),
            _c("The brother died on the mountain.", 0.3, ("brother",), ("died", "dead", "death")),
        ],
    },
    {
        "title": "The Empty Cage",
        "surface": "A zookeeper smiled when she found the parrot's cage empty.",
        "bottom": "The parrot had learned to repeat the zoo director's secret passwords, and the director wanted it "
        "silenced. The zookeeper secretly released the parrot into the forest to save its life, so the empty "
        "cage meant her plan had worked.",
        "criteria": [
            _c(
                "She released the parrot herself to save it.",
                0.5,
                ("released", "freed", "free"),
                ("save", "saved", "protect"),
            ),
            _c(
                "The director wanted the parrot silenced or killed.",
                0.3,
                ("director",),
                ("silenced", "kill", "killed"),
            ),
            _c("The parrot repeated secrets.", 0.2, ("secret", "password", "passwords")),
        ],
    },
    {
        "title": "The Wrong Birthday",
        "surface": "A boy received a birthday cake on the wrong day and burst into tears of joy.",
        "bottom": "The boy had been adopted and never knew his real birthday. The cake came from his birth mother, "
        "who had finally found him and sent it on his true birthday.",
        "criteria": [
            _c("The boy was adopted.", 0.5, ("adopted", "adoption")),
            _c("The cake came from his birth mother.", 0.3, ("mother",)),
            _c("The day was his real birthday.", 0.2, ("real", "true", "actual"), ("birthday",)),
        ],
    },
    {
        "title": "The Free Ride",
        "surface": "A taxi driver refused to take money from a passenger and drove away in tears.",
        "bottom": "The passenger was the surgeon who had saved the driver's daughter years ago without charging "
        "anything. The driver recognised him and wanted to repay his kindness.",
        "criteria": [
            _c("The passenger was a surgeon or doctor.", 0.4, ("surgeon", "doctor")),
            _c(
                "He had saved the driver's daughter.", 0.4, ("saved", "save"), ("daughter", "child")
            ),
            _c(
                "The driver wanted to repay a kindness.",
                0.2,
                ("repay", "thank", "gratitude", "kindness"),
            ),
        ],
    },
    {
        "title": "The Dark House",
        "surface": "A man switched off all the power in his house, and his neighbours were saved.",
        "bottom": "There was a gas leak in the building and the man noticed sparks from a faulty switch. He cut the "
        "power at the main switch to prevent an explosion and warned the neighbours to leave.",
        "criteria": [
            _c("There was a gas leak.", 0.5, ("gas",), ("leak", "leaking")),
            _c("Cutting the power prevented an explosion.", 0.3, ("explosion", "explode", "fire")),
            _c("Sparks from a switch were the danger.", 0.2, ("sparks", "spark")),
        ],
    },
    {
        "title": "The Late Letter",
        "surface": "An old woman read a letter and started packing for a trip she had planned fifty years ago.",
        "bottom": "The letter was written by her first love fifty years earlier but was lost in the post. It asked "
        "her to meet him in Venice. She learned he was still alive and waiting, so she went.",
        "criteria": [
            _c("The letter was from her first love.", 0.4, ("love", "lover", "sweetheart")),
            _c("The letter was lost in the post for decades.", 0.3, ("lost",), ("post", "mail")),
            _c("He is still alive and waiting for her.", 0.3, ("alive", "waiting")),
        ],
    },
    {
        "title": "The Wet Footprints",
        "surface": "A detective saw wet footprints leading into a house on a dry day and arrested the owner.",
        "bottom": "The owner claimed he had been home all day, but there had been a burglary next door and the thief "
        "escaped by swimming across the neighbour's pool. The wet prints matched the owner's shoes, so he lied.",
        "criteria": [
            _c(
                "The owner lied about being home all day.",
                0.4,
                ("lied", "lie", "claimed"),
                ("home",),
            ),
            _c(
                "The water came from a pool he swam through.",
                0.4,
                ("pool", "swim", "swimming", "swam"),
            ),
            _c("There was a burglary next door.", 0.2, ("burglary", "robbery", "thief", "theft")),
        ],
    },
    {
        "title": "The Quiet Concert",
        "surface": "A pianist played a whole concert that nobody heard, and the audience cried.",
        "bottom": "The audience was deaf. The pianist, who had lost her own hearing, played on a stage that carried "
        "the vibrations through the floor, so they could feel the music.",
        "criteria": [
            _c("The audience was deaf.", 0.5, ("deaf",)),
            _c(
                "They felt the music as vibrations.",
                0.3,
                ("vibrations", "vibration", "feel", "felt"),
            ),
            _c("The pianist had lost her hearing.", 0.2, ("lost",), ("hearing",)),
        ],
    },
    {
        "title": "The Extra Plate",
        "surface": "Every evening a family set an extra plate at dinner. One evening they stopped, and everyone celebrated.",
        "bottom": "The extra plate kept the place of the father, a soldier missing in a war. The evening they stopped, "
        "he had returned home alive, so his place was no longer empty.",
        "criteria": [
            _c(
                "The plate was for a missing father.",
                0.4,
                ("father", "dad"),
                ("missing", "soldier", "war"),
            ),
            _c("He returned home.", 0.4, ("returned", "return", "came"), ("home",)),
            _c("The plate kept his place.", 0.2, ("place", "seat")),
        ],
    },
]

"""The built-in search world, written for mua: a small fictional corpus and two-hop questions.

The places and people are invented, so a model cannot answer from memory and must search.
Each question lists the queries an expert would issue, one per hop, and its answer.
"""

from __future__ import annotations

DOCUMENTS: list[dict] = [
    {
        "title": "Varnholt",
        "text": "Varnholt is a harbour town on the northern coast of the kingdom of Eldmark. It is known for its glassworks and for its lighthouse, built in 1822.",
    },
    {
        "title": "Eldmark",
        "text": "Eldmark is a small kingdom whose capital is Brisa. Its currency is the eld crown.",
    },
    {
        "title": "Brisa",
        "text": "Brisa, the capital of Eldmark, lies on the river Oune. The Royal Observatory of Brisa was founded by the astronomer Tilde Okafor.",
    },
    {
        "title": "Tilde Okafor",
        "text": "Tilde Okafor (1790-1861) was an astronomer born in Varnholt. She discovered the comet Okafor-3 in 1834.",
    },
    {
        "title": "Comet Okafor-3",
        "text": "Okafor-3 is a periodic comet that returns every 41 years. It is named after the astronomer who first observed it.",
    },
    {
        "title": "Pellan Mora",
        "text": "Pellan Mora was a composer from the village of Quessa who wrote the opera The Salt Bell in 1901.",
    },
    {
        "title": "The Salt Bell",
        "text": "The Salt Bell is an opera by Pellan Mora, first performed at the Lantern Theatre in Brisa.",
    },
    {
        "title": "Quessa",
        "text": "Quessa is a mountain village in the Drae Highlands, famous for its goat cheese.",
    },
    {
        "title": "Drae Highlands",
        "text": "The Drae Highlands are a mountain range whose highest peak is Mount Corvel, 3,412 metres high.",
    },
    {
        "title": "Lantern Theatre",
        "text": "The Lantern Theatre in Brisa was designed by the architect Iver Sallow and opened in 1876.",
    },
    {
        "title": "Iver Sallow",
        "text": "Iver Sallow was an architect born in Quessa. His best-known works are the Lantern Theatre and Brisa Central Station.",
    },
    {
        "title": "Brisa Central Station",
        "text": "Brisa Central Station, designed by Iver Sallow, opened in 1889. Its clock tower is 54 metres tall.",
    },
    {
        "title": "Marrow Glassworks",
        "text": "The Marrow Glassworks in Varnholt was founded by Odile Marrow in 1850. It is famous for blue bottle glass.",
    },
    {
        "title": "Odile Marrow",
        "text": "Odile Marrow studied chemistry at the University of Brisa before founding the Marrow Glassworks.",
    },
    {
        "title": "University of Brisa",
        "text": "The University of Brisa was founded in 1702. Its motto is 'Light through water'.",
    },
    {
        "title": "River Oune",
        "text": "The river Oune rises in the Drae Highlands and flows 280 kilometres to the sea at Varnholt.",
    },
]

QUESTIONS: list[dict] = [
    {
        "question": "In which town was the founder of the Royal Observatory of Brisa born?",
        "answers": ["Varnholt"],
        "hops": ["who founded the Royal Observatory of Brisa", "Tilde Okafor born"],
    },
    {
        "question": "In what year did the founder of the Royal Observatory of Brisa discover a comet?",
        "answers": ["1834"],
        "hops": ["Royal Observatory of Brisa founder", "Tilde Okafor comet discovered"],
    },
    {
        "question": "Who designed the theatre where The Salt Bell was first performed?",
        "answers": ["Iver Sallow"],
        "hops": ["The Salt Bell first performed theatre", "Lantern Theatre designed by"],
    },
    {
        "question": "In which mountain range is the home village of the composer of The Salt Bell?",
        "answers": ["Drae Highlands", "the Drae Highlands"],
        "hops": ["composer of The Salt Bell", "Quessa village"],
    },
    {
        "question": "What is the highest peak of the mountains where the river Oune rises?",
        "answers": ["Mount Corvel", "Corvel"],
        "hops": ["river Oune rises", "Drae Highlands highest peak"],
    },
    {
        "question": "In what year did the theatre where The Salt Bell premiered open?",
        "answers": ["1876"],
        "hops": ["The Salt Bell performed theatre", "Lantern Theatre opened"],
    },
    {
        "question": "Where did the founder of the Marrow Glassworks study chemistry?",
        "answers": ["University of Brisa", "the University of Brisa"],
        "hops": ["Marrow Glassworks founded by", "Odile Marrow studied chemistry"],
    },
    {
        "question": "What is the motto of the university where Odile Marrow studied?",
        "answers": ["Light through water"],
        "hops": ["Odile Marrow studied university", "University of Brisa motto"],
    },
    {
        "question": "What is the capital of the kingdom where Varnholt lies?",
        "answers": ["Brisa"],
        "hops": ["Varnholt kingdom", "Eldmark capital"],
    },
    {
        "question": "How tall is the clock tower of the station designed by the architect of the Lantern Theatre?",
        "answers": ["54 metres", "54 meters", "54 m"],
        "hops": ["Lantern Theatre architect", "Brisa Central Station clock tower"],
    },
    {
        "question": "What is the currency of the kingdom whose capital lies on the river Oune?",
        "answers": ["eld crown", "the eld crown"],
        "hops": ["capital on the river Oune", "Eldmark currency"],
    },
    {
        "question": "In which village was the architect of the Lantern Theatre born?",
        "answers": ["Quessa"],
        "hops": ["Lantern Theatre designed architect", "Iver Sallow born"],
    },
]

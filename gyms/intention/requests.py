"""The built-in vague requests, written for mua.

Each request lists its missing details: a description, an importance (3 high .. 1 low), a
natural clarifying question, possible answers, and keywords for the scripted judge (a question
covers a detail when any keyword occurs in it as whole words, after light stemming).
"""

from __future__ import annotations


def _d(
    description: str, importance: int, inquiry: str, options: list[str], keywords: list[str]
) -> dict:
    return {
        "description": description,
        "importance": importance,
        "inquiry": inquiry,
        "options": options,
        "keywords": keywords,
    }


REQUESTS: list[dict] = [
    {
        "category": "Travel",
        "task": "Book me a hotel for my trip.",
        "missing_details": [
            _d(
                "Destination city",
                3,
                "Which city are you travelling to?",
                ["Lisbon", "Tokyo", "Chicago"],
                ["city", "destination", "where"],
            ),
            _d(
                "Travel dates",
                3,
                "What dates will you check in and check out?",
                ["May 3 to May 7", "the first week of June"],
                ["date", "dates", "when", "check in"],
            ),
            _d(
                "Budget per night",
                2,
                "What is your budget per night?",
                ["under 100 dollars", "100 to 200 dollars"],
                ["budget", "price", "cost", "afford"],
            ),
            _d(
                "Number of guests",
                1,
                "How many guests will stay in the room?",
                ["just me", "two adults"],
                ["guests", "people", "how many"],
            ),
        ],
    },
    {
        "category": "Cooking",
        "task": "Give me a recipe for dinner tonight.",
        "missing_details": [
            _d(
                "Dietary restrictions",
                3,
                "Do you have any dietary restrictions or allergies?",
                ["vegetarian", "no restrictions", "gluten free"],
                ["dietary", "allergy", "allergies", "vegetarian", "restriction"],
            ),
            _d(
                "Time available to cook",
                2,
                "How much time do you have to cook?",
                ["30 minutes", "an hour"],
                ["time", "minutes", "quick", "long"],
            ),
            _d(
                "Number of servings",
                2,
                "How many servings do you need?",
                ["two", "four"],
                ["servings", "portions", "feed"],
            ),
            _d(
                "Preferred cuisine",
                1,
                "Which cuisine do you prefer?",
                ["Italian", "Thai", "Mexican"],
                ["cuisine", "style of food"],
            ),
        ],
    },
    {
        "category": "Shopping",
        "task": "Help me buy a new laptop.",
        "missing_details": [
            _d(
                "Main use of the laptop",
                3,
                "What will you mainly use the laptop for?",
                ["programming", "gaming", "office work"],
                ["use", "purpose"],
            ),
            _d(
                "Budget",
                3,
                "What is your budget for the laptop?",
                ["under 800 dollars", "around 1500 dollars"],
                ["budget", "price", "spend", "cost"],
            ),
            _d(
                "Operating system preference",
                2,
                "Do you prefer a particular operating system?",
                ["macOS", "Windows", "Linux"],
                ["operating system", "os", "windows", "mac", "linux"],
            ),
            _d(
                "Screen size",
                1,
                "What screen size do you want?",
                ["13 inch", "15 inch"],
                ["screen", "size", "inch", "display"],
            ),
        ],
    },
    {
        "category": "Fitness",
        "task": "Make me a workout plan.",
        "missing_details": [
            _d(
                "Fitness goal",
                3,
                "What is your main fitness goal?",
                ["lose weight", "build muscle", "run a 10k"],
                ["goal", "aim", "achieve"],
            ),
            _d(
                "Current fitness level",
                2,
                "How would you describe your current fitness level?",
                ["beginner", "intermediate"],
                ["level", "experience", "beginner"],
            ),
            _d(
                "Days per week available",
                2,
                "How many days per week can you train?",
                ["three", "five"],
                ["days", "week", "often", "frequency"],
            ),
            _d(
                "Equipment access",
                1,
                "What equipment or gym access do you have?",
                ["a full gym", "only dumbbells at home"],
                ["equipment", "gym", "dumbbells", "weights"],
            ),
        ],
    },
    {
        "category": "Writing",
        "task": "Write a speech for me.",
        "missing_details": [
            _d(
                "Occasion of the speech",
                3,
                "What is the occasion of the speech?",
                ["a wedding toast", "a retirement party"],
                ["occasion", "event", "wedding"],
            ),
            _d(
                "Length of the speech",
                2,
                "How long should the speech be?",
                ["about two minutes", "five minutes"],
                ["length", "long", "minutes"],
            ),
            _d(
                "Audience",
                2,
                "Who will the audience be?",
                ["family and friends", "colleagues"],
                ["audience", "listeners", "attend"],
            ),
            _d(
                "Tone",
                1,
                "What tone would you like: funny, formal or heartfelt?",
                ["funny", "heartfelt"],
                ["tone", "funny", "formal", "serious"],
            ),
        ],
    },
    {
        "category": "Events",
        "task": "Plan a birthday party.",
        "missing_details": [
            _d(
                "Whose birthday and their age",
                3,
                "Whose birthday is it, and how old will they be?",
                ["my daughter, turning 7", "my father, turning 60"],
                ["whose", "age", "old", "turning"],
            ),
            _d(
                "Number of guests",
                2,
                "How many guests are you expecting?",
                ["about 10", "around 30"],
                ["guests", "people", "invite"],
            ),
            _d(
                "Budget",
                2,
                "What budget do you have for the party?",
                ["300 dollars", "1000 dollars"],
                ["budget", "spend", "cost", "money"],
            ),
            _d(
                "Venue",
                1,
                "Do you want it at home or at a venue?",
                ["at home", "in a rented hall"],
                ["venue", "location", "home", "hall"],
            ),
        ],
    },
    {
        "category": "Finance",
        "task": "Help me start saving money.",
        "missing_details": [
            _d(
                "Savings goal",
                3,
                "What are you saving for?",
                ["an emergency fund", "a house deposit"],
                ["saving for", "goal", "target"],
            ),
            _d(
                "Monthly income",
                2,
                "What is your monthly income after tax?",
                ["3000 dollars", "5000 dollars"],
                ["income", "salary", "earn"],
            ),
            _d(
                "Current debts",
                2,
                "Do you have any debts, such as loans or credit cards?",
                ["a car loan", "no debts"],
                ["debt", "debts", "loan", "credit"],
            ),
            _d(
                "Time horizon",
                1,
                "By when do you need the money?",
                ["in one year", "in five years"],
                ["horizon", "by when", "deadline", "years"],
            ),
        ],
    },
    {
        "category": "Education",
        "task": "Teach me a new language.",
        "missing_details": [
            _d(
                "Which language",
                3,
                "Which language do you want to learn?",
                ["Spanish", "Japanese"],
                ["which language", "what language"],
            ),
            _d(
                "Current level",
                2,
                "What is your current level in it?",
                ["complete beginner", "some basics"],
                ["level", "beginner", "already"],
            ),
            _d(
                "Reason for learning",
                2,
                "Why do you want to learn it?",
                ["for travel", "for work"],
                ["why", "reason", "motivation"],
            ),
            _d(
                "Daily study time",
                1,
                "How much time can you study each day?",
                ["15 minutes", "an hour"],
                ["time", "minutes", "daily", "hours"],
            ),
        ],
    },
    {
        "category": "Home",
        "task": "Help me redecorate my living room.",
        "missing_details": [
            _d(
                "Style preference",
                3,
                "What style do you like, for example modern or rustic?",
                ["modern", "rustic", "minimalist"],
                ["style", "modern", "rustic", "look"],
            ),
            _d(
                "Budget",
                2,
                "What budget do you have for redecorating?",
                ["500 dollars", "3000 dollars"],
                ["budget", "spend", "cost"],
            ),
            _d(
                "Room size",
                2,
                "How large is the room?",
                ["about 20 square metres", "quite small"],
                ["large", "size", "square", "dimensions"],
            ),
            _d(
                "Things to keep",
                1,
                "Is there furniture you want to keep?",
                ["the sofa", "nothing"],
                ["keep", "furniture", "existing"],
            ),
        ],
    },
    {
        "category": "Pets",
        "task": "Recommend a pet for me.",
        "missing_details": [
            _d(
                "Living space",
                3,
                "Do you live in a flat or a house with a garden?",
                ["a small flat", "a house with a garden"],
                ["flat", "apartment", "house", "garden", "live in"],
            ),
            _d(
                "Time for care",
                2,
                "How much time can you spend caring for a pet each day?",
                ["an hour", "a few minutes"],
                ["time", "care", "walk"],
            ),
            _d(
                "Allergies",
                2,
                "Does anyone at home have pet allergies?",
                ["no allergies", "cat allergy"],
                ["allergy", "allergies", "allergic"],
            ),
            _d(
                "Children at home",
                1,
                "Are there children at home?",
                ["two young kids", "no children"],
                ["children", "kids"],
            ),
        ],
    },
    {
        "category": "Career",
        "task": "Help me write my CV.",
        "missing_details": [
            _d(
                "Target job",
                3,
                "Which job or field are you applying for?",
                ["data analyst", "nurse"],
                ["job", "field", "position", "applying", "role"],
            ),
            _d(
                "Years of experience",
                2,
                "How many years of experience do you have?",
                ["two years", "ten years"],
                ["experience", "years"],
            ),
            _d(
                "Education",
                2,
                "What is your highest education?",
                ["a bachelor's degree", "a master's degree"],
                ["education", "degree", "studied"],
            ),
            _d(
                "Format",
                1,
                "Do you want a one-page or a two-page format?",
                ["one page", "two pages"],
                ["format", "page", "pages", "template"],
            ),
        ],
    },
    {
        "category": "Gifts",
        "task": "Suggest a gift for my friend.",
        "missing_details": [
            _d(
                "Friend's interests",
                3,
                "What are your friend's hobbies or interests?",
                ["hiking", "board games", "cooking"],
                ["hobbies", "interests", "like", "enjoy"],
            ),
            _d(
                "Budget",
                2,
                "How much do you want to spend?",
                ["about 30 dollars", "up to 100 dollars"],
                ["budget", "spend", "price", "cost"],
            ),
            _d(
                "Occasion",
                2,
                "What is the occasion?",
                ["birthday", "farewell"],
                ["occasion", "event", "celebrating"],
            ),
            _d(
                "Delivery deadline",
                1,
                "By when do you need the gift?",
                ["this Friday", "next month"],
                ["deadline", "need it", "by when", "delivery"],
            ),
        ],
    },
]

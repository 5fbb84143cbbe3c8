"""`shared_args`: argument texts written once per toolkit read in schemas as if each docstring
spelt them out (mua's tool schemas and tau2's)."""

from __future__ import annotations

from gyms.common.tool_docs import shared_args
from gyms.tau2.toolkit import function_schema
from mua.gym.tools import tool_schema

TABLE = {"user_id": "The user id.", "zip": "Zip code,\nfive digits.", "unused": "Never asked."}


class Spelt:
    def find(self, user_id: str, zip: str, city: str) -> str:
        """Find a user.

        Args:
            user_id: The user id.
            zip: Zip code,
                five digits.
            city: The city.
        """
        return ""


@shared_args(TABLE)
class Shared:
    def find(self, user_id: str, zip: str, city: str) -> str:
        """Find a user.

        Args:
            city: The city.
        """
        return ""

    def lookup(self, user_id: str) -> str:
        """Look a user up."""
        return ""

    def _private(self, user_id: str) -> str:
        """Not a tool."""
        return ""


def test_shared_argument_texts_give_the_spelt_out_schemas():
    assert tool_schema(Shared().find) == tool_schema(Spelt().find)
    assert function_schema("find", Shared().find) == function_schema("find", Spelt().find)
    lookup = function_schema("lookup", Shared().lookup)["function"]
    assert lookup["description"] == "Look a user up."
    assert lookup["parameters"]["properties"]["user_id"]["description"] == "The user id."
    find = function_schema("find", Shared().find)["function"]["parameters"]["properties"]
    assert find["zip"]["description"] == "Zip code,\nfive digits."
    assert tool_schema(Shared().find)["function"]["parameters"]["properties"]["zip"] == {
        "type": "string",
        "description": "Zip code, five digits.",
    }
    assert Shared._private.__doc__ == "Not a tool."


def test_a_docstrings_own_text_wins():
    @shared_args(TABLE)
    class Own:
        def find(self, user_id: str) -> str:
            """Find.

            Args:
                user_id: Whose account.
            """
            return ""

    schema = tool_schema(Own().find)["function"]["parameters"]["properties"]
    assert schema["user_id"]["description"] == "Whose account."

"""The tau2 database cache: every environment's database is a private copy equal to the file's
validated model (what a deep copy of it would be), a changed file is read again, and a domain's
load check validates without building an environment."""

from __future__ import annotations

import json
import os
from datetime import date
from typing import Literal

import pytest

from gyms.tau2 import dbcache
from gyms.tau2.domain import load_domain
from gyms.tau2.toolkit import DBModel, dict_hash
from tests.conftest import shared_dir


class Card(DBModel):
    source: Literal["card"]
    balance: float


class Gift(DBModel):
    source: Literal["gift"]
    code: str


class User(DBModel):
    name: str
    born: date
    methods: dict[str, Card | Gift]
    orders: list[str]


class Db(DBModel):
    users: dict[str, User]


ROWS = {
    "users": {
        "u1": {
            "name": "Ann",
            "born": "1990-02-03",
            "methods": {
                "c": {"source": "card", "balance": 10},
                "g": {"source": "gift", "code": "x"},
            },
            "orders": ["#1", "#2"],
        }
    }
}


def test_each_copy_is_private_and_equals_the_validated_file(tmp_path):
    path = tmp_path / "db.json"
    path.write_text(json.dumps(ROWS))
    first, second = dbcache.fresh_db(path, Db), dbcache.fresh_db(path, Db)
    validated = Db.model_validate(ROWS)
    assert first == validated == validated.model_copy(deep=True) and first is not second
    assert isinstance(first.users["u1"].methods["g"], Gift)
    assert dict_hash(first.model_dump()) == dict_hash(validated.model_dump())
    first.users["u1"].orders.append("#3")
    first.users["u1"].methods["c"].balance = 0.0
    assert second.users["u1"].orders == ["#1", "#2"]
    assert dbcache.fresh_db(path, Db) == validated  # the cache is untouched by its copies
    changed = json.loads(json.dumps(ROWS))
    changed["users"]["u1"]["name"] = "Bea"
    path.write_text(json.dumps(changed) + " ")  # changed: read again
    os.utime(path, ns=(1, 1))
    assert dbcache.fresh_db(path, Db).users["u1"].name == "Bea"


def test_check_db_raises_what_fresh_db_would(tmp_path):
    path = tmp_path / "db.json"
    path.write_text(json.dumps({"users": {"u1": {"name": "Ann"}}}))
    with pytest.raises(ValueError, match="born") as checked:
        dbcache.check_db(path, Db)
    with pytest.raises(ValueError, match="born") as fresh:
        dbcache.fresh_db(path, Db)
    assert str(checked.value) == str(fresh.value)


@pytest.mark.parametrize("name", ["retail", "airline"])
def test_a_domains_databases_copy_as_validated(name):
    data = shared_dir() / "data" / "tau2"
    if not (data / "tau2" / "domains" / name / "db.json").is_file():
        pytest.skip(f"tau2 {name} data not found under {data}")
    domain = load_domain(name, data)
    domain.check_loads()
    env = domain.new_environment()
    path = data / "tau2" / "domains" / name / "db.json"
    validated = type(env.agent.db).model_validate(json.loads(path.read_text()))
    assert env.agent.db == validated
    assert env.db_hash() == dict_hash(validated.model_dump())
    assert domain.new_environment().agent.db is not env.agent.db

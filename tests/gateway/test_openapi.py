"""/openapi.json and /docs against the running gateway: the document and the app agree.

The gateway is served for real (conftest's LiveGateway) in front of the in-test stand-in
servers. Every route the app serves must be in the document with its method, and every request
example the document gives must match its own schema and be answered 200 by the app.
"""

import jsonschema
import pytest
from fastapi.routing import APIRoute


@pytest.fixture
def client(gateway_factory):
    # The examples' `dimensions` are for a model trained for truncation; the test model is not.
    return gateway_factory(allow_truncated_dimensions=True)


def resolve(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def documented_examples(document: dict):
    """(method, path, example, schema) for every request example in the document."""
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            schema = resolve(document, content["application/json"]["schema"])
            for example in schema.get("examples", []):
                yield method.upper(), path, example, schema


def test_every_route_of_the_app_is_documented(client):
    document = client.get("/openapi.json").json()
    served = {(method, route.path_format) for route in client.app.routes
              if isinstance(route, APIRoute) for method in route.methods}
    documented = {(method.upper(), path) for path, operations in document["paths"].items()
                  for method in operations}
    assert served and served == documented, served ^ documented
    assert {"/v1/embeddings", "/v2/embed", "/embed", "/rerank", "/v1/models/{model}"} <= set(
        document["paths"])


def test_every_documented_example_matches_its_schema_and_is_answered(client):
    document = client.get("/openapi.json").json()
    examples = list(documented_examples(document))
    assert len({path for _, path, _, _ in examples}) >= 9, "every body route has an example"
    components = {"components": document["components"]}
    for method, path, example, schema in examples:
        # The document's own references resolve inside it.
        jsonschema.validate(example, {**schema, **components},
                            cls=jsonschema.Draft202012Validator)
        answer = client.request(method, path, json=example)
        assert answer.status_code == 200, (path, example, answer.text)


def test_swagger_ui_is_served_and_can_be_turned_off(gateway_factory):
    on = gateway_factory()
    assert on.get("/docs").status_code == 200 and "swagger" in on.get("/docs").text.lower()
    off = gateway_factory(docs=False)
    assert off.get("/docs").status_code == 404
    assert off.get("/openapi.json").status_code == 200

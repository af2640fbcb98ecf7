# The environment's tools, in the form llm's --functions takes (plain Python functions; llm builds
# their JSON schema from the signature and docstring). Tool execution is environment dynamics:
# these are ours; the loop that decides to call them, feeds back their results and stops is llm's.


def add(a: int, b: int) -> int:
    """Adds two integers and returns their sum."""
    return a + b

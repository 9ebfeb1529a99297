"""What a student receives of an answer cell: the helper that the grading and report tests
share (nbgrader's release replaces each solution block by ``raise NotImplementedError()``)."""


def stub_answer(src: str) -> str:
    """An answer cell as released: its solution replaced by ``raise NotImplementedError()``."""
    out, inside = [], False
    for line in src.splitlines():
        if "### BEGIN SOLUTION" in line:
            inside = True
            out.append(line.replace("### BEGIN SOLUTION", "raise NotImplementedError()"))
        elif "### END SOLUTION" in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)

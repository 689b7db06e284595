"""The "Other Parameters" section of docstrings, written from the signatures.

Every gradient-trained estimator takes some thirty training parameters that its base
class documents (:class:`~dask_dgd.linear_model.DGDLinearModel`,
:class:`~dask_dgd.recommender.FactorizationBase`); the data generators of
:mod:`dask_dgd.datasets` share four that the module's docstring documents.  Each
estimator's or generator's docstring documents its own parameters and lists the rest
under "Other Parameters", pointing at where they are documented.
:func:`other_parameters` writes that list from the signature, so that it is not written
by hand in every class (and cannot miss a parameter added to :mod:`dask_dgd._params`),
and inserts it after the Parameters section: ``__doc__`` stays a complete numpydoc
docstring for ``help()``, Sphinx and scikit-learn's checks.
"""

import inspect

__all__ = ["other_parameters"]


def _is_header(lines, i):
    """Whether ``lines[i]`` is a section title underlined by the next line."""
    title = lines[i].strip()
    return bool(title) and i + 1 < len(lines) and lines[i + 1].strip() == "-" * len(title)


def _parameters_section(lines):
    """``(indent, first, end)``: the Parameters section's indentation, its first entry's
    line and the line after it ends (the next section's title, or the end)."""
    for i in range(len(lines)):
        if lines[i].strip() == "Parameters" and _is_header(lines, i):
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            end = next((j for j in range(i + 2, len(lines)) if _is_header(lines, j)), len(lines))
            while end > i + 2 and not lines[end - 1].strip():
                end -= 1
            return indent, i + 2, end
    raise ValueError("the docstring has no Parameters section to follow")


def other_parameters(description, attributes=None):
    """A decorator of a class or function: its docstring gets, after its Parameters
    section, an "Other Parameters" section naming every parameter of its signature (a
    class's: its ``__init__``'s) that the Parameters section does not, in signature
    order, described by ``description``, then an "Attributes" section of ``attributes``
    (numpydoc lines, unindented) if given."""

    def decorate(obj):
        lines = obj.__doc__.splitlines()
        indent, first, end = _parameters_section(lines)
        documented = set()
        for line in lines[first:end]:
            if line.strip() and not line[len(indent):].startswith(" "):
                documented.update(name.strip() for name in line.split(" : ")[0].split(","))
        names = [name for name in inspect.signature(obj).parameters if name not in documented]
        section = ["", "Other Parameters", "----------------", ", ".join(names),
                   *("    " + line for line in description.splitlines())]
        if attributes is not None:
            section += ["", "Attributes", "----------", *attributes.splitlines()]
        lines[end:end] = [indent + line if line else line for line in section]
        obj.__doc__ = "\n".join(lines)
        return obj

    return decorate

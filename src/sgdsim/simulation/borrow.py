"""A numba ``StructRef`` handle without reference counting, for the compiled loops.

numba counts references to a ``StructRef`` and to every array it holds: each
compiled function increments the handle's count on entry and decrements it on
exit, and each field read of an array does the same for the array, with
atomic instructions that LLVM cannot remove across a call. In an event loop of
small functions (:mod:`sgdsim.simulation.fast_general`) that was most of the
run time. :func:`borrow` gives the loop a :class:`BorrowedType` handle to the
same payload instead: the handle is a plain pointer, and reading an array field
gives the array without its meminfo, so neither is counted (other counted
fields, a nested ``StructRef``, are counted as usual); an array bound to a
local once is then read through registers. Storing a field (``st.pool = grown``)
counts as ``StructRef`` does: the payload owns its arrays.

Rules, which the caller keeps:

- the ``StructRef`` that was borrowed stays alive while the handle is used:
  numba drops a variable after its last use, so the function that borrows it
  takes it as an argument or reads it again after the loop (the results);
- nothing read through the handle escapes to Python or into a field (return
  arrays read from the ``StructRef`` itself);
- a local bound to an array field is dropped before anything that may replace
  that field (a growing heap or pool).

numba's cache does not see a change to this module in the loops that use it:
after editing it, delete their cached compilations (``__pycache__/*.nbi``).
"""

from __future__ import annotations

from typing import Any

from numba.core import cgutils, imputils, types
from numba.core.datamodel import default_manager, models
from numba.core.extending import (
    infer_getattr,
    intrinsic,
    lower_getattr_generic,
    lower_setattr_generic,
)
from numba.core.typing.templates import AttributeTemplate
from numba.experimental import structref


class BorrowedType(types.StructRef):
    """A ``StructRef``'s fields, reached through a pointer that is not counted."""

    def preprocess_fields(self, fields):  # type: ignore[no-untyped-def]
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class _BorrowedModel(models.StructModel):
    """The payload's meminfo as a plain pointer: no reference counting."""

    def __init__(self, dmm, fe_typ):  # type: ignore[no-untyped-def]
        super().__init__(dmm, fe_typ, [("meminfo", types.voidptr)])


default_manager.register(BorrowedType, _BorrowedModel)


@infer_getattr
class _BorrowedAttribute(AttributeTemplate):
    key = BorrowedType

    def generic_resolve(self, typ, attr):  # type: ignore[no-untyped-def]
        return typ.field_dict.get(attr)


@lower_getattr_generic(BorrowedType)
def _getattr(context, builder, typ, val, attr):  # type: ignore[no-untyped-def]
    """A field; an array without its meminfo (so it is not counted), any other
    counted value (a nested ``StructRef``) with its count, as ``StructRef`` gives it."""
    value = getattr(structref._Utils(context, builder, typ).get_data_struct(val), attr)
    fieldtype = typ.field_dict[attr]
    if not isinstance(fieldtype, types.Array):
        return imputils.impl_ret_borrowed(context, builder, fieldtype, value)
    ary = context.make_array(fieldtype)(context, builder, value=value)
    ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
    return imputils.impl_ret_untracked(context, builder, fieldtype, ary._getvalue())


@lower_setattr_generic(BorrowedType)
def _setattr(context, builder, sig, args, attr):  # type: ignore[no-untyped-def]
    """Store a field as ``StructRef`` does: the payload holds the new value, drops the old."""
    inst_type, val_type = sig.args
    instance, val = args
    data = structref._Utils(context, builder, inst_type).get_data_struct(instance)
    casted = context.cast(builder, val, val_type, inst_type.field_dict[attr])
    old = getattr(data, attr)
    context.nrt.incref(builder, val_type, casted)
    context.nrt.decref(builder, val_type, old)
    setattr(data, attr, casted)


def _borrow(typingctx: Any, st: types.StructRef) -> Any:
    """``st``'s payload through a :class:`BorrowedType` handle."""
    borrowed = BorrowedType(list(st.field_dict.items()))

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        src = cgutils.create_struct_proxy(sig.args[0])(context, builder, value=args[0])
        out = cgutils.create_struct_proxy(sig.return_type)(context, builder)
        out.meminfo = builder.bitcast(src.meminfo, cgutils.voidptr_t)
        return out._getvalue()

    return borrowed(st), codegen


#: ``borrow(st)``: the ``StructRef`` ``st``'s payload through a :class:`BorrowedType`
#: handle (jit code only; the module docstring gives the rules).
borrow: Any = intrinsic(_borrow)

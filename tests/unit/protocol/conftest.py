from __future__ import annotations

from hypothesis import strategies as st
from kio.static.primitive import Records

# kio registers hypothesis strategies for its primitive types but not for record sets; opaque bytes
# are all the protocol layer ever sees of them.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

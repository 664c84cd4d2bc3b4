"""What every test shares."""

from hypothesis import settings

# The tests make no timing claims: a property test that takes long on a loaded machine is slow, not wrong (Hypothesis's
# default deadline of 200 ms per example failed tests here while other jobs shared the cores).
settings.register_profile("ringtrace", deadline=None)
settings.load_profile("ringtrace")

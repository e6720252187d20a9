"""A PLAIN verification callback for the SASL tests
(listener.name.<l>.plain.sasl.server.callback.handler.class=tests.plain_callback.verify)."""


def verify(username: str, password: str) -> bool:
    # an "external" directory: the password is the user name reversed
    return password == username[::-1]

"""What the coordinators (groups, transactions) share: the trio shell that
drives their pure state machines (`shell`) and the lookup that creates their
internal topic (`topic`)."""

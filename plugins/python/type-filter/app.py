"""A hookgate transform written in Python: drops deliveries of event types a receiver
does not want, and labels the ones it forwards.

Config:
  drop_types  comma-separated shell-style patterns (`test.*, internal.ping`); a matching
              event is dropped (the delivery ends as succeeded, `dropped_by_plugin`).
  label       value of the `X-Event-Type-Label` header added to forwarded requests
              (default: the event type).

Build: componentize-py -d ../../../wit -w transformer componentize app -o type_filter.wasm
"""

from fnmatch import fnmatchcase

import wit_world
from wit_world.imports import config, log, types
from wit_world.imports import message as outgoing


class WitWorld(wit_world.WitWorld):
    def transform(
        self,
        endpoint: types.EndpointInfo,
        event: types.EventInfo,
        delivery: types.DeliveryInfo,
        message: outgoing.OutgoingMessage,
    ) -> types.Outcome:
        patterns = [p.strip() for p in (config.get("drop_types") or "").split(",") if p.strip()]
        for pattern in patterns:
            if fnmatchcase(event.event_type, pattern):
                log.log(log.Level.DEBUG, f"dropping {event.id} ({event.event_type}) for {endpoint.name}")
                return types.Outcome_Drop(f"event type {event.event_type} matches {pattern}")
        label = config.get("label") or event.event_type
        # An edit, not a new message: the body the gateway lent is sent as it is, never
        # copied into the plugin.
        return types.Outcome_Forward(types.Edits([], [("X-Event-Type-Label", label.encode())], None))

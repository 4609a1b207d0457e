"""Typed ZeroMQ messages of the driver, no pickle: the one wire format that the auxiliary
services (driver.aux), the run's channel (driver.channel), the data pipeline's transport
form (driver.data.codec) and DiLoCo's link (driver.diloco) share.

- `envelope`: the packed binary header of every message, checked before use;
- `payload`: the body, a JSON frame plus one raw frame per array;
- `multipart`: moving multipart messages without copies, sizing frames;
- `wire`: the facade the users import (`wire.pack`, `wire.parse`, `wire.send`, ...).

Importing this package imports neither Ray nor torch.
"""

"""--help in sections: a command's options grouped under titles, and a group's commands in the order defined."""

from __future__ import annotations

from typing import Any

import click

OTHER = "Other options"


class SectionOption(click.Option):
    """An option that names the --help section it is listed in."""

    def __init__(self, *args: Any, section: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.section = section or OTHER


class SectionedCommand(click.Command):
    """A command whose --help lists its options in `sections`, in that order, instead of one long list."""

    def __init__(self, *args: Any, sections: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = (*sections, OTHER)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records: dict[str, list[tuple[str, str]]] = {title: [] for title in self.sections}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                records[getattr(param, "section", OTHER)].append(record)
        for title, rows in records.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class OrderedGroup(click.Group):
    """Commands listed in the order they are defined (the order a user meets them), not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

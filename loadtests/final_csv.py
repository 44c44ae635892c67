"""Locust's ``--csv`` reports written from the final statistics, so they count what the HTML report counts.

Locust (2.47) refreshes the CSV files from a background greenlet once a second
(``locust.stats.CSV_STATS_INTERVAL_SEC``) and, at exit, closes them without a last refresh (locust issues
#1806 and #2299). Whatever happened after the last refresh -- the users' last requests before the stop and
every ``on_stop`` request (``delete key``) -- was missing from ``*_stats.csv``, and so from the verdict of
``loadtests/run.py`` and its ``summary.json``, while the HTML report and the log's summary, both made at
exit, counted it (a 20 s run: 8,553 requests in the CSV, 8,815 in the HTML report and the log, and no
``delete key`` row in the CSV).

:func:`install` makes Locust create :class:`FinalStatsCSVFileWriter` instead, which writes the request,
failure and exception files once more from the final statistics (and appends a last history row) when Locust
closes them, after every user has stopped.
"""

from __future__ import annotations

import time

from locust import stats as locust_stats


class FinalStatsCSVFileWriter(locust_stats.StatsCSVFileWriter):
    """Locust's CSV writer, plus one last write from the final statistics when the files are closed."""

    def close_files(self) -> None:
        """Write the final statistics, then close the files (Locust calls this once, at exit)."""
        self.write_final()
        super().close_files()

    def write_final(self) -> None:
        """Rewrite the request, failure and exception files and append a history row, all from the final
        statistics. Safe while Locust's own refresh greenlet exists: nothing here yields to it."""
        for handle, writer, columns, write_rows in (
            (
                self.requests_csv_filehandle,
                self.requests_csv_writer,
                self.requests_csv_columns,
                self._requests_data_rows,
            ),
            (
                self.failures_csv_filehandle,
                self.failures_csv_writer,
                self.failures_columns,
                self._failures_data_rows,
            ),
            (
                self.exceptions_csv_filehandle,
                self.exceptions_csv_writer,
                self.exceptions_columns,
                self._exceptions_data_rows,
            ),
        ):
            handle.seek(0)
            handle.truncate()
            writer.writerow(columns)
            write_rows(writer)
        if self.stats_history_csv_filehandle.tell() == 0:  # the refresh greenlet never ran
            self.stats_history_csv_writer.writerow(self.stats_history_csv_columns)
        self._stats_history_data_rows(self.stats_history_csv_writer, time.time())


def install() -> None:
    """Have Locust's ``--csv`` use :class:`FinalStatsCSVFileWriter` (``locust.main`` looks the class up in
    ``locust.stats`` when it starts the run, after the locustfile is imported)."""
    locust_stats.StatsCSVFileWriter = FinalStatsCSVFileWriter  # type: ignore[misc]

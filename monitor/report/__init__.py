"""`hop report`: prediction beside measurement, as the thesis' Tables 6.1 and 6.2.

Input is either a `hop validate` folder (``calibration/`` characterized at low load
and holding the predictions for the target workload, ``measurement/`` replayed
at the target workload, and with ``validation.json`` the further repetitions, whose
medians, intervals and spread `monitor.repeats` computes) or a single replay folder
(its characterization alone, and its own predictions if `hop predict` ran on it), or
a brokers' trace folder (`recording`: what the network did, nothing predicted).
Output: ``report.html`` (self-contained: figures are inline PNGs, styles inline,
nothing fetched) and ``report.md`` with the same tables.

`inputs` reads and checks the folders' files, `comparison` joins predictions with
measurements, `figures` draws, `text` words the summary and the sections, `page` and
`recording` compose them (`render`), and `document` writes both files.
"""

from monitor.report.inputs import ReportError
from monitor.report.page import render

__all__ = ["ReportError", "render"]

"""The parts of `python -m vidvol report`: what is read from a prepared dataset, its images and charts, the page.

`gather` reads (the card, the splits, a sample of the records), `media` draws the previews, `svg` the
charts, `page` writes the HTML; `vidvol.cli.report` puts them together.
"""

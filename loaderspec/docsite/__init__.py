"""The documentation site's generators: what ``mkdocs build`` draws from the code.

``mkdocs.yml`` runs ``loaderspec.docsite.hooks``, which expands ``<!-- docsite: ... -->``
directives in the pages (``loaderspec.docsite.pages``), draws the core's state diagrams from its
transition tables (``statediagram``) and sequence diagrams from runs of the reference loader
recorded during the build (``examples``, ``sequence``), publishes the source files the pages link
to (``sources``), and fails the build on a link into the checkout that does not resolve
(``links``). Only ``hooks`` and ``links`` import MkDocs or Markdown.
"""

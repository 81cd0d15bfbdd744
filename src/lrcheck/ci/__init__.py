"""What lrcheck's GitHub Action (``action.yml``) runs besides lrcheck itself: ``comment``, the
pull request's one lrcheck comment. Standard library only."""

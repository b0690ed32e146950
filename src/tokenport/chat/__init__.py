"""Conversations -> token ids + loss masks: record formats, chat templates, masking policies."""

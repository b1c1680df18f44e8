"""The chat as plain objects: conversations and their history on disk, replies as they stream
(:class:`~fleetgui.app.chat.chats.Chats`), and replies as HTML. No widgets here."""

"""Paths of the console (mounted at the site root by ``millrace.project.urls``)."""

from __future__ import annotations

from django.contrib.auth import views as auth
from django.urls import path

from admin_ui import access as acl
from admin_ui import actions as a
from admin_ui import kafka as kf
from admin_ui import kvtables as kv
from admin_ui import schemas as sr
from admin_ui import security as sec
from admin_ui import views as v

app_name = "console"

SCOPE = "scopes/<str:scope>"
STREAM = f"{SCOPE}/streams/<str:stream>"
RG = f"{SCOPE}/readergroups/<str:reader_group>"
KVT = f"{SCOPE}/kvtables/<str:kvtable>"

urlpatterns = [
    path("login/", auth.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth.LogoutView.as_view(), name="logout"),
    path("", v.dashboard, name="dashboard"),
    path("dashboard/health", v.dashboard_health, name="dashboard-health"),
    path("dashboard/live.json", v.dashboard_live, name="dashboard-live"),
    path("cluster/", v.cluster, name="cluster"),
    path("kafka/", kf.kafka, name="kafka"),
    path("find", v.find, name="find"),
    path("scopes/", v.scopes, name="scopes"),
    path("scopes/create", a.scope_create, name="scope-create"),
    path(f"{SCOPE}/delete", a.scope_delete, name="scope-delete"),
    path(f"{SCOPE}/quota", a.scope_quota, name="scope-quota"),
    path(f"{SCOPE}/streams/", v.streams, name="streams"),
    path(f"{SCOPE}/streams/new", v.stream_new, name="stream-new"),
    path(f"{SCOPE}/streams/create", a.stream_create, name="stream-create"),
    path(f"{STREAM}/", v.stream_detail, name="stream"),
    path(f"{STREAM}/edit", v.stream_edit, name="stream-edit"),
    path(f"{STREAM}/update", a.stream_update, name="stream-update"),
    path(f"{STREAM}/seal", a.stream_seal, name="stream-seal"),
    path(f"{STREAM}/schema", sr.stream_schema, name="stream-schema"),
    path(f"{STREAM}/delete", a.stream_delete, name="stream-delete"),
    path(f"{STREAM}/scale", a.stream_scale, name="stream-scale"),
    path(f"{STREAM}/truncate", a.stream_truncate, name="stream-truncate"),
    path(f"{STREAM}/events", v.events, name="events"),
    path(f"{STREAM}/transactions/commit", a.txn_commit_many, name="txn-commit-many"),
    path(f"{STREAM}/transactions/<str:txn_id>/commit", a.txn_commit, name="txn-commit"),
    path(f"{STREAM}/transactions/<str:txn_id>/abort", a.txn_abort, name="txn-abort"),
    path(f"{SCOPE}/transactions/", v.scope_transactions, name="transactions"),
    path(f"{SCOPE}/readergroups/", v.reader_groups, name="reader-groups"),
    path(f"{RG}/", v.reader_group, name="reader-group"),
    path(f"{RG}/checkpoint", a.rg_checkpoint, name="rg-checkpoint"),
    path(f"{RG}/reset", a.rg_reset, name="rg-reset"),
    path(f"{SCOPE}/kvtables/", kv.kvtables, name="kvtables"),
    path(f"{SCOPE}/kvtables/create", kv.kvtable_create, name="kvtable-create"),
    path(f"{KVT}/", kv.kvtable, name="kvtable"),
    path(f"{KVT}/delete", kv.kvtable_delete, name="kvtable-delete"),
    path(f"{KVT}/entries/put", kv.entry_put, name="kvtable-put"),
    path(f"{KVT}/entries/remove", kv.entry_remove, name="kvtable-remove"),
    path("schemas/", sr.subjects, name="schemas"),
    path("schemas/register", sr.schema_register, name="schema-register"),
    path("schemas/config", sr.schema_config, name="schema-config"),
    path("schemas/<str:subject>/", sr.subject, name="schema"),
    path("schemas/<str:subject>/test", sr.schema_test, name="schema-test"),
    path("schemas/<str:subject>/delete", sr.schema_delete, name="schema-delete"),
    path("audit/", v.audit, name="audit"),
    path("security/", sec.security, name="security"),
    path("security/access/", acl.access, name="access"),
    path("security/access/grant", acl.grant, name="acl-grant"),
    path("security/access/revoke", acl.revoke, name="acl-revoke"),
    path("security/access/members", acl.members, name="acl-members"),
    path("security/access/import", acl.pravega_import, name="acl-import"),
    path("security/token-secret/rotate", sec.secret_rotate, name="secret-rotate"),
    path("security/users/create", sec.user_create, name="user-create"),
    path("security/users/<str:user>/role", sec.user_role, name="user-role"),
    path("security/users/<str:user>/password", sec.user_password, name="user-password"),
    path("security/users/<str:user>/disable", sec.user_disable, name="user-disable"),
    path("security/users/<str:user>/enable", sec.user_enable, name="user-enable"),
    path("security/users/<str:user>/delete", sec.user_delete, name="user-delete"),
    path("security/tokens/<str:user>/rotate", sec.token_rotate, name="token-rotate"),
    path("security/tokens/<str:user>/revoke", sec.token_revoke, name="token-revoke"),
    path("security/sign-ins/unlock", sec.signin_unlock, name="signin-unlock"),
]

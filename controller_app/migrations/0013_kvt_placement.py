"""Key-value tables get a placement (``millrace.kernel.kvt.PLACEMENTS``): the tables that exist
keep ADR 0009's (``millrace-1``), so their keys stay where they were written; new ones place
keys as Pravega's Java client does (``pravega``)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("controller_app", "0012_audit_result_unchanged")]

    operations = [
        migrations.AddField(
            model_name="keyvaluetable",
            name="placement",
            field=models.CharField(default="millrace-1", max_length=16),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="keyvaluetable",
            name="placement",
            field=models.CharField(default="pravega", max_length=16),
        ),
    ]

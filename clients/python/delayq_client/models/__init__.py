"""Contains all the data models used in inputs/outputs"""

from .bulk_scheduled import BulkScheduled
from .bulk_scheduled_errors_item import BulkScheduledErrorsItem
from .bulk_task import BulkTask
from .bulk_task_mode import BulkTaskMode
from .cancelled import Cancelled
from .cancelled_state import CancelledState
from .error_body import ErrorBody
from .fire_lateness_response_200 import FireLatenessResponse200
from .get_recurring_response_200 import GetRecurringResponse200
from .health_response_200 import HealthResponse200
from .held_key import HeldKey
from .list_dead_letters_response_200_item import ListDeadLettersResponse200Item
from .list_nodes_response_200_item import ListNodesResponse200Item
from .list_pending_tasks_response_200_item import ListPendingTasksResponse200Item
from .list_queues_response_200 import ListQueuesResponse200
from .list_recurring_response_200_item import ListRecurringResponse200Item
from .openapi_document_response_200 import OpenapiDocumentResponse200
from .pause_recurring_response_200 import PauseRecurringResponse200
from .purged import Purged
from .queue_deleted import QueueDeleted
from .queue_paused import QueuePaused
from .readiness_response_200 import ReadinessResponse200
from .readiness_response_503 import ReadinessResponse503
from .recurring_body import RecurringBody
from .recurring_body_misfire import RecurringBodyMisfire
from .recurring_body_overlap import RecurringBodyOverlap
from .recurring_deleted import RecurringDeleted
from .recurring_set import RecurringSet
from .recurring_set_result import RecurringSetResult
from .resume_recurring_response_200 import ResumeRecurringResponse200
from .retried import Retried
from .scheduled import Scheduled
from .task import Task
from .task_body import TaskBody
from .task_body_mode import TaskBodyMode
from .task_state import TaskState
from .time_zone import TimeZone

__all__ = (
    "BulkScheduled",
    "BulkScheduledErrorsItem",
    "BulkTask",
    "BulkTaskMode",
    "Cancelled",
    "CancelledState",
    "ErrorBody",
    "FireLatenessResponse200",
    "GetRecurringResponse200",
    "HealthResponse200",
    "HeldKey",
    "ListDeadLettersResponse200Item",
    "ListNodesResponse200Item",
    "ListPendingTasksResponse200Item",
    "ListQueuesResponse200",
    "ListRecurringResponse200Item",
    "OpenapiDocumentResponse200",
    "PauseRecurringResponse200",
    "Purged",
    "QueueDeleted",
    "QueuePaused",
    "ReadinessResponse200",
    "ReadinessResponse503",
    "RecurringBody",
    "RecurringBodyMisfire",
    "RecurringBodyOverlap",
    "RecurringDeleted",
    "RecurringSet",
    "RecurringSetResult",
    "ResumeRecurringResponse200",
    "Retried",
    "Scheduled",
    "Task",
    "TaskBody",
    "TaskBodyMode",
    "TaskState",
    "TimeZone",
)

"""Contains all the data models used in inputs/outputs"""

from .bulk_task import BulkTask
from .bulk_task_mode import BulkTaskMode
from .cancel_task_response_200 import CancelTaskResponse200
from .delete_queue_response_200 import DeleteQueueResponse200
from .delete_recurring_response_200 import DeleteRecurringResponse200
from .error_body import ErrorBody
from .fire_lateness_response_200 import FireLatenessResponse200
from .get_recurring_response_200 import GetRecurringResponse200
from .get_task_response_200 import GetTaskResponse200
from .health_response_200 import HealthResponse200
from .list_dead_letters_response_200_item import ListDeadLettersResponse200Item
from .list_nodes_response_200_item import ListNodesResponse200Item
from .list_pending_tasks_response_200_item import ListPendingTasksResponse200Item
from .list_queues_response_200 import ListQueuesResponse200
from .list_recurring_response_200_item import ListRecurringResponse200Item
from .openapi_document_response_200 import OpenapiDocumentResponse200
from .pause_queue_response_200 import PauseQueueResponse200
from .pause_recurring_response_200 import PauseRecurringResponse200
from .purge_all_dead_letters_response_200 import PurgeAllDeadLettersResponse200
from .purge_dead_letter_response_200 import PurgeDeadLetterResponse200
from .readiness_response_200 import ReadinessResponse200
from .readiness_response_503 import ReadinessResponse503
from .recurring_body import RecurringBody
from .recurring_body_misfire import RecurringBodyMisfire
from .recurring_body_overlap import RecurringBodyOverlap
from .resume_queue_response_200 import ResumeQueueResponse200
from .resume_recurring_response_200 import ResumeRecurringResponse200
from .retry_all_dead_letters_response_200 import RetryAllDeadLettersResponse200
from .retry_dead_letter_response_200 import RetryDeadLetterResponse200
from .schedule_task_response_200 import ScheduleTaskResponse200
from .schedule_tasks_response_200 import ScheduleTasksResponse200
from .set_recurring_response_200 import SetRecurringResponse200
from .task_body import TaskBody
from .task_body_mode import TaskBodyMode
from .time_zone import TimeZone

__all__ = (
    "BulkTask",
    "BulkTaskMode",
    "CancelTaskResponse200",
    "DeleteQueueResponse200",
    "DeleteRecurringResponse200",
    "ErrorBody",
    "FireLatenessResponse200",
    "GetRecurringResponse200",
    "GetTaskResponse200",
    "HealthResponse200",
    "ListDeadLettersResponse200Item",
    "ListNodesResponse200Item",
    "ListPendingTasksResponse200Item",
    "ListQueuesResponse200",
    "ListRecurringResponse200Item",
    "OpenapiDocumentResponse200",
    "PauseQueueResponse200",
    "PauseRecurringResponse200",
    "PurgeAllDeadLettersResponse200",
    "PurgeDeadLetterResponse200",
    "ReadinessResponse200",
    "ReadinessResponse503",
    "RecurringBody",
    "RecurringBodyMisfire",
    "RecurringBodyOverlap",
    "ResumeQueueResponse200",
    "ResumeRecurringResponse200",
    "RetryAllDeadLettersResponse200",
    "RetryDeadLetterResponse200",
    "ScheduleTaskResponse200",
    "ScheduleTasksResponse200",
    "SetRecurringResponse200",
    "TaskBody",
    "TaskBodyMode",
    "TimeZone",
)

from django.urls import path

from . import views

app_name = "quotas"
urlpatterns = [path("", views.home, name="home")]
